"""What must happen on the driver before Ray starts, for both entry points.

verl's ``python -m verl.trainer.main_ppo`` composes the config and hands it first to
``verl.utils.device.auto_set_device``. :func:`install` wraps that function; the package's verl plug-in
calls it when ``import verl`` runs, which is before verl's entry module is executed, so an unchanged verl
GRPO script with the ``reinforce_ada`` config group appended is prepared exactly as
``python -m reinforce_ada.main_ppo`` prepares its runs (that entry point calls verl's ``main`` too).
A config without a ``reinforce_ada`` section is handed to verl untouched.

:func:`prepare`:

* the ``reinforce_ada`` section and the reference implementation's ``algorithm.*`` keys are checked and
  the adaptive rollout wired into verl's hooks; errors name the key (exit status 2);
* with ``trainer.device=cpu`` the CPU platform is switched on here and, through ``VERL_PLATFORM``, in
  every process Ray starts (:mod:`reinforce_ada.platform.cpu`), and GPU-only settings are neutralised;
* a run that starts its own Ray on this machine listens on 127.0.0.1 only
  (:mod:`reinforce_ada.platform.loopback`);
* a run of several nodes must checkpoint to an absolute path (storage every node shares), and a run on verl's
  default reward says which scorer its data will meet (:mod:`reinforce_ada.integration.default_reward`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Mapping

from omegaconf import DictConfig

from reinforce_ada.core.config import ConfigError
from reinforce_ada.core.messages import say

SECTION = "reinforce_ada"


def prepare(config: DictConfig) -> None:
    """All checks and config changes that must happen on the driver before Ray starts (idempotent)."""
    from reinforce_ada.integration.default_reward import default_reward_note
    from reinforce_ada.integration.verl_config import prepare_config
    from reinforce_ada.platform import cpu, loopback

    section = config.get(SECTION)
    if section is not None and not isinstance(section, Mapping):
        raise ConfigError(
            f"{SECTION}: got {section!r}, not a section: Hydra did not find the config group, so "
            f"+{SECTION}={section} became a plain value and verl would run without adaptive sampling; put "
            f"hydra.searchpath=[pkg://reinforce_ada.configs] before +{SECTION}={section}"
        )
    cpu.check_platform(config)
    check_checkpoint_dir(config)
    if config.trainer.get("device") == "cpu":
        os.environ["VERL_PLATFORM"] = cpu.PLATFORM  # Ray's workers inherit it and load the platform
        cpu.activate(set_current=True)  # here too: verl's entry module fixed its platform when imported
    prepare_config(config)
    if config.trainer.get("device") == "cpu":
        cpu.prepare_config(config)
    loopback.bind_to_loopback(config)
    note = default_reward_note(config)
    if note:
        say(note)


def check_checkpoint_dir(config: DictConfig) -> None:
    """On several nodes every trainer rank writes its shard of a checkpoint, and the driver the pass-rate
    tracker, into ``trainer.default_local_dir`` from its own working directory: a relative path would scatter
    them over the nodes' (and Ray's temporary) directories, where a resume finds a partial checkpoint."""
    trainer = config.trainer
    folder = str(trainer.get("default_local_dir"))
    if int(trainer.get("nnodes", 1)) > 1 and not os.path.isabs(folder):
        raise ConfigError(
            f"trainer.default_local_dir: a run on {trainer.nnodes} nodes needs an absolute path on storage that every "
            f"node mounts at the same place (each rank writes its own shard there), got {folder!r}"
        )


def install() -> None:
    """Wraps ``verl.utils.device.auto_set_device`` so that a config with a ``reinforce_ada`` section is
    prepared first (idempotent)."""
    import verl.utils.device as device

    original = device.auto_set_device
    if getattr(original, "_reinforce_ada", False):
        return

    @functools.wraps(original)
    def auto_set_device(config) -> None:
        if config is not None and SECTION in config:
            try:
                prepare(config)
            except ConfigError as err:
                print(f"error: {err}", file=sys.stderr)
                sys.exit(2)
        return original(config)

    auto_set_device._reinforce_ada = True
    device.auto_set_device = auto_set_device
    for name in ("verl.trainer.main_ppo", "__main__"):  # an entry module imported before this bound the original
        module = sys.modules.get(name)
        if module is not None and module.__dict__.get("auto_set_device") is original:
            module.auto_set_device = auto_set_device
