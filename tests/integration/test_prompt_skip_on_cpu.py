"""Skipping prompts without signal in the V1 manager, on the fake rollout of test_agent_loop_on_cpu and a fake
verl refill that fetches the next prompts of a data stream and submits them to the manager, as verl does."""

import itertools

import numpy as np
import pytest
import torch

from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.skip import SkipRule
from reinforce_ada.core.tracker import prompt_identity
from reinforce_ada.integration import handover
from reinforce_ada.integration.checkpoint import save_tracker
from reinforce_ada.integration.prompt_skip import PromptSkipper

from test_agent_loop_on_cpu import published, v1_manager  # noqa: F401 (fixture)

GRPO_SKIP = SamplerConfig(round_size=4, max_rounds=1, skip=True)  # GRPO-n4 with the skip, as +reinforce_ada=grpo_skip
DATA = ["easy", "hard", "mixed", "turns"]  # always right, always wrong, half right; "turns": wrong, then half right


class Rewards:
    """Each visit's rewards by uid ("<prompt>#<visit>"); "turns" gives no signal before visit TURN_AT."""

    TURN_AT = 12

    def __getitem__(self, uid):
        name, visit = uid.split("#")
        if name == "easy":
            return [1] * 32
        if name == "hard" or (name == "turns" and int(visit) < self.TURN_AT):
            return [0] * 32
        return [1, 0] * 16


def key(name):
    return prompt_identity([{"role": "user", "content": name}], "fake")


class Stream:
    """verl's dataloader and refill: the data in order, epoch after epoch; each fetch a new uid."""

    def __init__(self, manager, step=1):
        self.manager, self.step, self.visits = manager, step, itertools.count()
        self.names = itertools.cycle(DATA)

    def batch(self, count):
        from verl.utils import tensordict_utils as tu

        visits = [next(self.visits) for _ in range(count)]
        names = [next(self.names) for _ in range(count)]
        raw = np.empty(count, dtype=object)
        raw[:] = [[{"role": "user", "content": n}] for n in names]
        batch = tu.get_tensordict({
            "input_ids": torch.zeros(count, 3, dtype=torch.long),
            "uid": np.array([f"{n}#{v // len(DATA)}" for n, v in zip(names, visits)], dtype=object),
            "raw_prompt": raw, "data_source": np.array(["fake"] * count, dtype=object),
        })
        tu.assign_non_tensor_data(batch, "global_steps", self.step)
        return batch

    def refill(self, count):  # the trainer's refill_fn: fetch, register, submit to the manager
        self.manager.generate_sequences(self.batch(count))
        return count


def skipping_manager(config=GRPO_SKIP, seed=0):
    manager = v1_manager(config, rewards=Rewards())
    manager.skipper = PromptSkipper(SkipRule(config.skip_growth, config.skip_cap, seed), manager._clear_samples,
                                    lambda batch: [prompt_identity(m, s) for m, s in zip(batch["raw_prompt"],
                                                                                           batch["data_source"])])
    stream = Stream(manager)
    handover.offer_refill(stream.refill)
    return manager, stream


@pytest.fixture
def no_refill():
    yield
    handover.offer_refill(None)


def run_steps(manager, stream, steps, batch_size=len(DATA)):
    per_step = []
    for step in range(1, steps + 1):
        stream.step = step
        manager.requests.clear()
        cleared = len(manager.cleared)
        manager.generate_sequences(stream.batch(batch_size))
        sampled = [uid for request in manager.requests for uid in request]
        skipped = [k for k in manager.cleared[cleared:] if k.count("_") == 0]  # prompt keys, not samples
        per_step.append((sampled, skipped, handover.pop_step_metrics()))
    return per_step


def test_grpo_with_the_skip_keeps_the_batch_size_and_skips_only_prompts_without_signal(published, no_refill):  # noqa: F811,E501
    manager, stream = skipping_manager()
    steps = run_steps(manager, stream, 40)
    last_signal = {}
    skipped_names = []
    for sampled, skipped, metrics in steps:
        assert len(sampled) == len(DATA)  # the skipped prompts were replaced from the data
        assert not set(sampled) & set(skipped)
        assert all(last_signal.get(uid.split("#")[0]) is False for uid in skipped)  # uniform at its last visit
        skipped_names += [uid.split("#")[0] for uid in skipped]
        assert metrics["reinforce_ada/skip/skipped"] == len(skipped)
        assert metrics["reinforce_ada/skip/fetched"] == len(DATA) + len(skipped)
        assert metrics["reinforce_ada/samples_total"] == 4 * len(DATA)  # GRPO-n4: one round of 4 per prompt
        for uid in sampled:
            name, visit = uid.split("#")
            last_signal[name] = len(set(Rewards()[uid][:4])) == 2
    assert "mixed" not in skipped_names  # always informative: never skipped
    assert skipped_names.count("easy") > 5 and skipped_names.count("hard") > 5
    # "turns" became informative: once probed with both outcomes, it is not skipped again
    turned = [i for i, (sampled, _, _) in enumerate(steps) if any(u.startswith("turns#") and
                                                                   int(u.split("#")[1]) >= Rewards.TURN_AT
                                                                   for u in sampled)]
    assert turned and not any(u.startswith("turns#") for _, skipped, _ in steps[turned[0] + 1:] for u in skipped)
    assert manager.skipper.rule.streak(key("turns")) == 0 and manager.skipper.rule.streak(key("easy")) > 5
    probed = [m for _, _, m in steps if "reinforce_ada/skip/probe_signal_frac" in m]
    assert probed and all(0 <= m["reinforce_ada/skip/probe_signal_frac"] <= 1 for m in probed)
    assert any(m["reinforce_ada/skip/probe_signal_frac"] > 0 for m in probed)  # the probe that found "turns" again


def test_the_skip_state_survives_a_checkpoint_and_a_resumed_manager_decides_the_same(published, no_refill,  # noqa: F811
                                                                                      tmp_path):
    from omegaconf import OmegaConf

    first, stream = skipping_manager()
    run_steps(first, stream, 6)
    save_tracker(first.tracker, str(tmp_path / "global_step_6"), 6, skip=first.skipper.rule)
    resumed, _ = skipping_manager()
    resumed._tracker_checked = False
    resumed.config = OmegaConf.create({"trainer": {"resume_mode": "auto", "default_local_dir": str(tmp_path)}})
    resumed._restore_tracker(7)
    keys = [key(n) for n in DATA]
    assert [resumed.skipper.rule.streak(k) for k in keys] == [first.skipper.rule.streak(k) for k in keys]
    assert resumed.skipper.rule.decide(keys, 7) == first.skipper.rule.decide(keys, 7)


def test_a_refill_that_brings_the_wrong_count_is_an_error(published, no_refill):  # noqa: F811
    manager, stream = skipping_manager()
    run_steps(manager, stream, 3)  # easy and hard are candidates now
    handover.offer_refill(lambda count: manager.generate_sequences(stream.batch(count + 1)))
    with pytest.raises(RuntimeError, match="to replace skipped ones"):
        for _ in range(20):  # until a step skips something
            run_steps(manager, stream, 1)


def test_without_a_replay_buffer_to_refill_the_skip_says_what_is_missing(published, no_refill):  # noqa: F811
    manager, stream = skipping_manager()
    run_steps(manager, stream, 3)
    handover.offer_refill(None)
    with pytest.raises(RuntimeError, match="custom_sampler must be reinforce_ada's"):
        for _ in range(20):
            run_steps(manager, stream, 1)


def test_the_skip_needs_the_v1_trainer_and_single_prompt_fetches_before_ray_starts():
    from hydra import compose, initialize_config_module

    from reinforce_ada.integration.verl_config import prepare_config

    def compose_ours(*overrides):
        with initialize_config_module(config_module="reinforce_ada.configs", version_base=None):
            return compose(config_name="reinforce_ada", overrides=list(overrides))

    config = compose_ours("reinforce_ada.skip=true")
    prepare_config(config)
    assert config.data.gen_batch_size == 1
    with pytest.raises(ConfigError, match="^trainer.use_v1: reinforce_ada.skip"):
        prepare_config(compose_ours("reinforce_ada.skip=true", "trainer.use_v1=false"))
    with pytest.raises(ConfigError, match="^data.gen_batch_size: reinforce_ada.skip"):
        prepare_config(compose_ours("reinforce_ada.skip=true", "+data.gen_batch_size=8"))
    with pytest.raises(ConfigError, match="^reinforce_ada.skip_cap: must be below 1"):
        prepare_config(compose_ours("reinforce_ada.skip=true", "reinforce_ada.skip_cap=1.0"))


def test_the_grpo_skip_group_turns_a_grpo_script_into_grpo_with_the_skip():
    from hydra import compose, initialize_config_module

    from reinforce_ada.integration.verl_config import prepare_config

    with initialize_config_module(config_module="verl.trainer.config", version_base=None):
        config = compose(config_name="ppo_trainer", overrides=[
            "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=8",
            "hydra.searchpath=[pkg://reinforce_ada.configs]", "+reinforce_ada=grpo_skip"])
    sampler = prepare_config(config)
    assert (sampler.n, sampler.round_size, sampler.max_rounds, sampler.skip) == (8, 8, 1, True)
    assert sampler.n_max == 8 and config.algorithm.adv_estimator == "grpo"  # n per prompt, the group's baseline
