"""The ``reinforce_ada`` section of a verl config: reading, reference-key mapping, validation.

:func:`prepare_config` runs on the driver before Ray starts (``python -m reinforce_ada.main_ppo``)
and again inside the rollout manager (which is all that runs when verl's own entry point is
used). It is idempotent. Every error names the config key to change.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from reinforce_ada.core.config import SECTION, ConfigError, RunConfig, SamplerConfig, rename_former_keys
from reinforce_ada.core.messages import say

# the public class path (reinforce_ada.integration.checkpoint itself imports verl, which this module must not)
CALLBACK_CLASS = "reinforce_ada.checkpoint.TrackerCheckpointCallback"

# Only this package writes these two paths into verl's config, so they name the modules themselves.
MANAGER_CLASS = "reinforce_ada.integration.agent_loop.AdaptiveAgentLoopManager"
SAMPLER_PATH = "pkg://reinforce_ada.integration.replay_buffer"
SAMPLER_NAME = "ReinforceAdaReplayBuffer"
# The paths of the forwarding modules these replaced: a saved config, or a script that spelled them out, still means
# this package's manager and buffer, and is pointed at the real modules (the forwarding ones no longer exist).
FORMER_MANAGER_CLASSES = ("reinforce_ada.agent_loop.AdaptiveAgentLoopManager",)
FORMER_SAMPLER_PATHS = ("pkg://reinforce_ada.replay_buffer",)
ESTIMATORS = ("reinforce_ada", "grpo")

# The reference implementation (RLHFlow/Reinforce-Ada) kept its settings under `algorithm`.
REFERENCE_KEYS = {
    "multiround_adaptive_downsampling": "enable",
    "reinforce_ada_choice": "variant",
    "positive_threshold": "threshold",
    "max_rounds": "max_rounds",
    "round_repeat": "round_size",
    "global_stat_est": None,  # selects the estimator, see _map_reference_keys
}
REFERENCE_VARIANTS = {"balanced": "balance", "positive_focused": "pos"}


def prepare_config(config: DictConfig) -> SamplerConfig | None:
    """Maps the reference keys, validates, and wires the adaptive rollout into verl's hooks.

    Args:
        config: The whole verl config; changed in place (reference keys moved into the
            ``reinforce_ada`` section, the manager and sampler hooks filled in).

    Returns:
        The sampler settings, or None when the adaptive rollout is off.

    Raises:
        ConfigError: On an invalid setting or combination, naming the key.
    """
    _map_reference_keys(config)
    _rename_former_keys(config)
    # checked even with the rollout off: the platform and the workers read these keys on their own
    enabled = RunConfig.from_config(config).enable
    estimator = config.algorithm.adv_estimator
    if estimator == "reinforce_ada" and not enabled:
        raise ConfigError(
            "algorithm.adv_estimator: 'reinforce_ada' needs the adaptive rollout; set reinforce_ada.enable=true "
            "(or choose another estimator)"
        )
    if not enabled:
        _remove_hooks(config)
        return None
    if estimator not in ESTIMATORS:
        raise ConfigError(
            f"algorithm.adv_estimator: the adaptive rollout works with 'reinforce_ada' (baseline from every sample "
            f"drawn) or 'grpo' (baseline from the kept group, the reference's global_stat_est=false), got {estimator!r}"
        )
    sampler = sampler_config(config)
    _check_compatible(config, sampler)
    _install_hooks(config, sampler)
    return sampler


def sampler_config(config: DictConfig) -> SamplerConfig:
    """The :class:`SamplerConfig` of the ``reinforce_ada`` section, n from ``rollout.n``."""
    values: dict[str, Any] = {k: v for k, v in OmegaConf.to_container(config[SECTION], resolve=True).items()}
    for name in {f.name for f in fields(RunConfig)} - {f.name for f in fields(SamplerConfig)}:
        values.pop(name, None)  # the run's alone (RunConfig)
    values["n"] = config.actor_rollout_ref.rollout.n
    try:
        return SamplerConfig.from_mapping(values, prefix=f"{SECTION}.")
    except ConfigError as err:
        message = str(err)
        if message.startswith(f"{SECTION}.n:"):  # n is verl's key, not ours
            message = "actor_rollout_ref.rollout.n:" + message[len(f"{SECTION}.n:") :]
        raise ConfigError(message) from None


def _rename_former_keys(config: DictConfig) -> None:
    """Moves a former key's value to its current key in the config itself, so that the note is printed once (on
    the driver) and the manager, which prepares the same config again, finds nothing left to move."""
    section = config.get(SECTION)
    if section is None:
        return
    with open_dict(section):
        for note in rename_former_keys(section, prefix=f"{SECTION}."):
            say(note)


def _map_reference_keys(config: DictConfig) -> None:
    algorithm = config.algorithm
    declared = [k for k in REFERENCE_KEYS if k in algorithm]  # our YAML declares them all, as null
    present = [k for k in declared if algorithm[k] is not None]
    if not declared:
        return
    with open_dict(config):
        if config.get(SECTION) is None:
            config[SECTION] = {}
        section = config[SECTION]
        for key in present:
            value = algorithm[key]
            target = REFERENCE_KEYS[key]
            if key == "reinforce_ada_choice":
                if value not in REFERENCE_VARIANTS:
                    raise ConfigError(
                        f"algorithm.reinforce_ada_choice: must be one of {', '.join(REFERENCE_VARIANTS)}, got {value!r}"
                    )
                value = REFERENCE_VARIANTS[value]
            if key == "global_stat_est":
                # The fork patched verl's `grpo` estimator to use the pool statistics when this was on.
                if value and algorithm.adv_estimator == "grpo":
                    algorithm.adv_estimator = "reinforce_ada"
            else:
                section[target] = value
        with open_dict(algorithm):
            for key in declared:
                del algorithm[key]  # verl's AlgoConfig dataclass would reject them


def _check_compatible(config: DictConfig, sampler: SamplerConfig) -> None:
    trainer = config.trainer
    use_v1 = trainer.get("use_v1", True)
    if use_v1 and trainer.v1.trainer_mode != "sync":
        raise ConfigError(
            f"trainer.v1.trainer_mode: the adaptive rollout samples with the policy frozen for the whole step "
            f"(in either reinforce_ada.mode) and needs 'sync', got {trainer.v1.trainer_mode!r}"
        )
    if use_v1 and trainer.v1.get("sampler", {}).get("sync_refill_failed_groups", False):
        raise ConfigError(
            "trainer.v1.sampler.sync_refill_failed_groups: the adaptive rollout redraws failed samples itself, and a "
            "step with nothing to keep trains with zero advantage; verl's refill would call the rollout one prompt "
            "at a time (data.gen_batch_size=1), serialising the rounds; set it to false"
        )
    if use_v1:
        _check_storage_capacity(config, sampler)
    filter_groups = config.algorithm.get("filter_groups") or {}
    if filter_groups.get("enable", False):
        raise ConfigError(
            "algorithm.filter_groups.enable: DAPO group filtering and the adaptive rollout both decide which groups "
            "are trained on; turn filtering off (Reinforce-Ada already keeps mixed groups)"
        )
    if config.algorithm.get("use_kl_in_reward", False):
        raise ConfigError(
            "algorithm.use_kl_in_reward: the pool baseline is computed from the raw rewards during the rounds, "
            "so an in-reward KL penalty would not be in it; use actor_rollout_ref.actor.use_kl_loss=true instead"
        )
    reward_model = config.reward.get("reward_model") or {}
    if reward_model.get("enable", False) and not reward_model.get("enable_resource_pool", False):
        raise ConfigError(
            "reward.reward_model.enable_resource_pool: the rounds need each sample's reward as it is generated, so a "
            "reward model needs its own resource pool (set it to true)"
        )
    if not use_v1 and sampler.mode == "async":
        raise ConfigError(
            "reinforce_ada.mode: 'async' (no round barrier) needs trainer.use_v1=true; the legacy trainer "
            "runs the synchronous rounds (use 'rounds')"
        )
    if not use_v1 and sampler.unresolved == "drop":
        raise ConfigError(
            "reinforce_ada.unresolved: 'drop' needs trainer.use_v1=true; the legacy trainer needs a fixed batch of "
            "train_batch_size * rollout.n samples (use 'keep')"
        )
    if not use_v1 and sampler.variant == "est":
        raise ConfigError(
            "trainer.use_v1: reinforce_ada.variant='est' draws a different number of samples per prompt, which the "
            "legacy trainer cannot take (it joins the rollout with the batch repeated rollout.n times per prompt); "
            "set trainer.use_v1=true"
        )
    if sampler.skip:
        _check_skip(config, use_v1)
    if not use_v1 and sampler.warm_start:
        raise ConfigError(
            "trainer.use_v1: reinforce_ada.warm_start keeps a pass-rate tracker across steps, saved through the V1 "
            "trainer's checkpoint callback; set trainer.use_v1=true (or warm_start=false)"
        )
    if sampler.downsample_correction != "none" and config.algorithm.adv_estimator != "reinforce_ada":
        raise ConfigError(
            f"reinforce_ada.downsample_correction: {sampler.downsample_correction!r} weighs the kept responses "
            "through the pool statistics, which only algorithm.adv_estimator=reinforce_ada reads; set it, or "
            f"downsample_correction=none (got adv_estimator={config.algorithm.adv_estimator!r})"
        )
    if sampler.variant == "est":
        if config.algorithm.adv_estimator != "reinforce_ada":
            raise ConfigError(
                "algorithm.adv_estimator: reinforce_ada.variant='est' needs 'reinforce_ada' (the baseline of all the "
                f"prompt's samples times Est's weight), got {config.algorithm.adv_estimator!r}"
            )
        if config.algorithm.get("norm_adv_by_std_in_grpo", False):
            raise ConfigError(
                "algorithm.norm_adv_by_std_in_grpo: Est's advantage (r - mean) / sqrt(mean) has no std division; "
                "set it to false"
            )


def _check_skip(config: DictConfig, use_v1: bool) -> None:
    """Skipped prompts are replaced through the V1 trainer's refill, which fetches whole dataloader batches."""
    if not use_v1:
        raise ConfigError(
            "trainer.use_v1: reinforce_ada.skip replaces skipped prompts through the V1 trainer's refill; the legacy "
            "trainer takes a fixed batch from its dataloader; set trainer.use_v1=true (or reinforce_ada.skip=false)"
        )
    gen_batch_size = config.data.get("gen_batch_size")
    if gen_batch_size not in (None, 1):
        raise ConfigError(
            f"data.gen_batch_size: reinforce_ada.skip refills exactly as many prompts as it skipped, so verl must "
            f"fetch prompts one at a time; leave it unset or set it to 1, got {gen_batch_size!r}"
        )
    with open_dict(config):
        config.data.gen_batch_size = 1


def _check_storage_capacity(config: DictConfig, sampler: SamplerConfig) -> None:
    """Before Ray starts, with one stored output per sample (single-turn and verl's tool agent loop); the rollout
    checks again when an agent loop stores more (:func:`storage_shortfall`)."""
    problem = storage_shortfall(config, sampler, outputs_per_sample=1)
    if problem:
        raise ConfigError(problem)


def storage_shortfall(config: DictConfig, sampler: SamplerConfig, outputs_per_sample: int) -> str | None:
    """What TransferQueue's SimpleStorage lacks for one V1 step, as a message naming the key; None if it holds it.

    A step keeps every sample drawn until its groups are formed, one entry per output the agent loop returns
    (a multi-turn loop may return several): up to ``train_batch_size x N_max x outputs`` entries. Once the
    samples not kept are cleared, verl pads the kept ones to a multiple of its mini-batch, fewer than
    ``ppo_mini_batch_size x n`` rows more. SimpleStorage refuses a put beyond its size, which fails those samples.
    """
    backend = (config.get("transfer_queue") or {}).get("backend") or {}
    if backend.get("storage_backend", "SimpleStorage") != "SimpleStorage":
        return None
    capacity = (backend.get("SimpleStorage") or {}).get("total_storage_size")
    batch = config.data.train_batch_size
    mini_batch = config.actor_rollout_ref.actor.get("ppo_mini_batch_size") or batch
    drawn = batch * sampler.n_max * outputs_per_sample
    padded = (batch + mini_batch) * sampler.n * outputs_per_sample
    peak = max(drawn, padded)
    if capacity is None or peak <= capacity:
        return None
    outputs = f" x {outputs_per_sample} outputs per sample (what the agent loop stores)" if outputs_per_sample > 1 \
        else ""
    return (
        f"transfer_queue.backend.SimpleStorage.total_storage_size: a step may hold up to data.train_batch_size "
        f"({batch}) x the samples a prompt may draw ({sampler.n_max}, reinforce_ada.round_size x max_rounds or "
        f"max_samples_per_prompt){outputs} = {drawn} entries, and the kept ones padded to verl's mini-batch up to "
        f"{padded}; that is more than the {capacity} it holds; raise it to at least {peak} (or null for no limit), "
        "or lower data.train_batch_size or reinforce_ada.max_samples_per_prompt"
    )


def _install_hooks(config: DictConfig, sampler: SamplerConfig) -> None:
    """Points verl's manager (both trainers), sampler and checkpoint-callback (V1) hooks at this package."""
    agent = config.actor_rollout_ref.rollout.agent
    current = agent.get("agent_loop_manager_class")
    if current not in (None, MANAGER_CLASS, *FORMER_MANAGER_CLASSES):
        raise ConfigError(
            f"actor_rollout_ref.rollout.agent.agent_loop_manager_class: the adaptive rollout needs {MANAGER_CLASS}, "
            f"got {current!r}"
        )
    with open_dict(config):
        agent.agent_loop_manager_class = MANAGER_CLASS
        if config.trainer.get("use_v1", True):
            custom = config.trainer.v1.sampler.custom_sampler
            if custom.get("path") not in (None, SAMPLER_PATH, *FORMER_SAMPLER_PATHS):
                raise ConfigError(
                    f"trainer.v1.sampler.custom_sampler.path: the adaptive rollout reports its metrics through "
                    f"{SAMPLER_PATH}:{SAMPLER_NAME}, got {custom.get('path')!r}"
                )
            custom.path, custom.name = SAMPLER_PATH, SAMPLER_NAME
            callback = config.trainer.get("checkpoint_callback_class")
            if callback in (None, CALLBACK_CLASS):
                config.trainer.checkpoint_callback_class = CALLBACK_CLASS
            elif (sampler.uses_tracker or sampler.skip) and not _saves_tracker(callback):
                raise ConfigError(
                    f"trainer.checkpoint_callback_class: reinforce_ada.variant='est', warm_start and skip save the "
                    f"pass-rate tracker and the skip rule's state with each checkpoint through {CALLBACK_CLASS}, got "
                    f"{callback!r}; subclass it (calling super().on_save) and name your subclass here"
                )


def _saves_tracker(callback_fqn: str) -> bool:
    """True if the named checkpoint callback is a subclass of ours (so it saves the tracker)."""
    from verl.utils.import_utils import load_class_from_fqn

    from reinforce_ada.integration.checkpoint import TrackerCheckpointCallback

    try:
        callback = load_class_from_fqn(callback_fqn, "CheckpointCallback")
    except (ImportError, AttributeError, ValueError) as err:
        raise ConfigError(f"trainer.checkpoint_callback_class: cannot load {callback_fqn!r}: {err}") from None
    return isinstance(callback, type) and issubclass(callback, TrackerCheckpointCallback)


def _remove_hooks(config: DictConfig) -> None:
    """With the adaptive rollout off, verl's own manager and replay buffer do the work."""
    agent = config.actor_rollout_ref.rollout.agent
    with open_dict(config):
        if agent.get("agent_loop_manager_class") in (MANAGER_CLASS, *FORMER_MANAGER_CLASSES):
            agent.agent_loop_manager_class = None
        custom = config.trainer.v1.sampler.custom_sampler
        if custom.get("path") in (SAMPLER_PATH, *FORMER_SAMPLER_PATHS):
            custom.path = custom.name = None
        if config.trainer.get("checkpoint_callback_class") == CALLBACK_CLASS:
            config.trainer.checkpoint_callback_class = None
