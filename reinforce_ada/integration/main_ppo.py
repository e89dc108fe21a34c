"""Entry point: verl's PPO trainer with Reinforce-Ada, configured by ``configs/reinforce_ada.yaml``.

    python -m reinforce_ada.main_ppo data.train_files=... actor_rollout_ref.model.path=... \\
        reinforce_ada.variant=balance actor_rollout_ref.rollout.n=4

Everything after the config checks is verl's own ``verl.trainer.main_ppo.main`` (both trainers,
Ray start-up, workers, logging, checkpoints). What this adds, before Ray starts:

* the ``reinforce_ada`` section and the reference implementation's ``algorithm.*`` keys are
  checked, and errors name the key (exit status 2);
* with ``trainer.device=cpu`` the CPU platform is switched on in every process (see
  :mod:`reinforce_ada.platform.cpu`) and its required settings are checked;
* a run that starts its own Ray on this machine listens on 127.0.0.1 only (see
  :mod:`reinforce_ada.platform.loopback`).
"""

from __future__ import annotations

import os
import sys

import hydra
from omegaconf import DictConfig

from reinforce_ada.core.config import ConfigError


def prepare(config: DictConfig) -> None:
    """All checks and config changes that must happen on the driver before Ray starts."""
    from reinforce_ada.integration.verl_config import prepare_config

    prepare_config(config)
    if config.trainer.get("device") == "cpu":
        from reinforce_ada.platform import cpu

        cpu.prepare_config(config)
    from reinforce_ada.platform import loopback

    loopback.bind_to_loopback(config)


@hydra.main(config_path="pkg://reinforce_ada.configs", config_name="reinforce_ada", version_base=None)
def main(config: DictConfig) -> None:
    if config.trainer.get("device") == "cpu":
        from reinforce_ada.platform import cpu

        os.environ["VERL_PLATFORM"] = cpu.PLATFORM  # Ray workers inherit it, and load the platform
        cpu.activate()  # here too: composing the config imported verl before the variable was set
    try:
        prepare(config)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    from verl.trainer.main_ppo import main as verl_main

    verl_main(config)  # hydra passes an explicit config straight through to verl's own main


if __name__ == "__main__":
    main()
