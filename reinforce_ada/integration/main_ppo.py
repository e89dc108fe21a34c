"""Entry point: verl's PPO trainer with Reinforce-Ada, configured by ``configs/reinforce_ada.yaml``.

    python -m reinforce_ada.main_ppo data.train_files=... actor_rollout_ref.model.path=... \\
        reinforce_ada.variant=balance actor_rollout_ref.rollout.n=4

It is verl's own ``verl.trainer.main_ppo.main`` (both trainers, Ray start-up, workers, logging,
checkpoints) with this package's config: verl's ``ppo_trainer`` plus the ``reinforce_ada`` group. The
preparation before Ray starts (:func:`reinforce_ada.integration.verl_entry.prepare`: checks that name
the key, the CPU platform, loopback) runs where it runs for verl's own entry point, at verl's first call.
"""

from __future__ import annotations

import os

import hydra
from omegaconf import DictConfig

from reinforce_ada.integration import verl_entry


@hydra.main(config_path="pkg://reinforce_ada.configs", config_name="reinforce_ada", version_base=None)
def main(config: DictConfig) -> None:
    verl_entry.install()  # the plug-in has done it already where verl's entry points are installed
    if config.trainer.get("device") == "cpu":  # before verl's entry module fixes its platform, when imported
        from reinforce_ada.platform import cpu

        os.environ["VERL_PLATFORM"] = cpu.PLATFORM
        cpu.activate(set_current=True)
    from verl.trainer.main_ppo import main as verl_main

    verl_main(config)  # hydra passes an explicit config straight through to verl's own main


if __name__ == "__main__":
    main()
