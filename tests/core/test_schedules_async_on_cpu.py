"""Asynchronous successive elimination: the same pools, groups and metrics as the rounds, less waiting."""

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforce_ada.core.config import ConfigError, SamplerConfig
from reinforce_ada.core.sampler import PromptSampler, RewardError
from reinforce_ada.core.schedules import run_async
from reinforce_ada.core.step import run_step

import strategies
from fake_rollouts import ShuffledRollout, round_generator

TIMINGS = {"rollout_seconds"}  # the only metrics allowed to differ between the modes


# rewards per (prompt, pool index): a prompt's i-th sample always gets the same reward
reward_tables = strategies.reward_tables([0.0, 1.0, 0.5, 0.71], length=70, max_prompts=12)


def without_timings(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k not in TIMINGS and not k.startswith("round_")}


@settings(max_examples=300, deadline=None)
@given(strategies.sampler_configs(), reward_tables, st.integers(0, 10**6))
def test_async_gives_the_pools_groups_and_metrics_of_the_rounds(config, rewards, order_seed):
    keys = [f"7:{i}" for i in range(len(rewards))]
    round_log: list = []
    rounds = run_step(keys, config, round_generator(rewards, round_log))
    fake = ShuffledRollout(rewards, order_seed)
    asynchronous = run_step(keys, SamplerConfig(**{**config.__dict__, "mode": "async"}), fake)

    assert [s.rewards for s in asynchronous.samplers] == [s.rewards for s in rounds.samplers]
    assert [s.rounds for s in asynchronous.samplers] == [s.rounds for s in rounds.samplers]
    assert [s.resolved for s in asynchronous.samplers] == [s.resolved for s in rounds.samplers]
    assert asynchronous.groups == rounds.groups  # kept indices, pool statistics, dropped
    assert without_timings(asynchronous.metrics()) == without_timings(rounds.metrics())
    # each prompt made the same requests (count, first pool index), only interleaved differently
    def per_prompt(log):
        return sorted(log, key=lambda r: (r[0], r[2]))

    assert per_prompt(fake.submitted) == per_prompt(round_log)
    assert asynchronous.round_seconds == [] and not any(k.startswith("round_") for k in asynchronous.metrics())


class TimedRollout:
    """A fake engine with unlimited concurrency where a request of prompt p takes durations[p]."""

    def __init__(self, rewards: list[list[float]], durations: list[float]):
        self.rewards, self.durations = rewards, durations
        self.now = 0.0
        self.drawn: dict[int, int] = defaultdict(int)
        self.in_flight: dict[int, tuple[float, list[float]]] = {}
        self.events: list[tuple[float, str, int]] = []

    def submit(self, prompt: int, count: int) -> None:
        start = self.drawn[prompt]
        self.drawn[prompt] += count
        self.in_flight[prompt] = (self.now + self.durations[prompt], self.rewards[prompt][start : start + count])
        self.events.append((self.now, "submit", prompt))

    def wait(self) -> list[tuple[int, list[float]]]:
        self.now = min(end for end, _ in self.in_flight.values())
        done = [p for p, (end, _) in self.in_flight.items() if end == self.now]
        self.events += [(self.now, "scored", p) for p in done]
        return [(p, self.in_flight.pop(p)[1]) for p in done]


def test_no_round_barrier_a_fast_prompt_continues_while_a_slow_one_generates():
    # prompt 0 needs 3 requests of 1 s each; prompt 1 needs 2 requests of 5 s each
    rewards = [[0.0] * 16 + [1.0] * 16, [0.0] * 8 + [1.0] * 24]
    config = SamplerConfig(mode="async")
    engine = TimedRollout(rewards, durations=[1.0, 5.0])
    step = run_step(["a", "b"], config, engine, clock=lambda: engine.now)
    assert [s.rounds for s in step.samplers] == [3, 2]
    assert (1.0, "submit", 0) in engine.events and (2.0, "submit", 0) in engine.events  # before prompt 1's first score
    assert step.rollout_seconds == 10.0  # the slow prompt's two requests; rounds would take 5 + 5 + 1 = 11
    rounds_engine = TimedRollout(rewards, durations=[1.0, 5.0])
    rounds = run_step(["a", "b"], SamplerConfig(), rounds_engine, clock=lambda: rounds_engine.now)
    assert rounds.round_seconds == [5.0, 5.0, 1.0] and rounds.rollout_seconds == 11.0
    assert rounds.groups == step.groups


def test_progress_is_reported_after_each_wait():
    rewards = [[0.0, 1.0] * 16, [0.0] * 32, [1.0] * 32]
    seen = []
    run_step(["a", "b", "c"], SamplerConfig(mode="async"), ShuffledRollout(rewards, 0), on_progress=seen.append)
    assert seen[-1].prompts_finished == 3 and seen[-1].prompts_in_flight == 0
    assert seen[-1].requests_scored == 1 + 4 + 4 and seen[-1].samples_drawn == 8 + 32 + 32
    assert all(p.prompts_finished + p.prompts_in_flight == 3 for p in seen)
    assert [p.requests_scored for p in seen] == sorted(p.requests_scored for p in seen)


def test_a_round_generator_in_async_mode_runs_the_same_rounds():
    rewards = [[0.0] * 17 + [1.0] * 15, [0.0] * 32, [1.0, 0.0] * 16]
    log_rounds, log_async = [], []
    rounds = run_step(list("abc"), SamplerConfig(), round_generator(rewards, log_rounds))
    asynchronous = run_step(list("abc"), SamplerConfig(mode="async"), round_generator(rewards, log_async))
    assert log_async == log_rounds and asynchronous.groups == rounds.groups


def test_broken_rollouts_are_reported():
    class Silent(ShuffledRollout):
        def wait(self):
            return []

    class Stray(ShuffledRollout):
        def wait(self):
            return [(5, [1.0] * 8)]

    rewards = [[1.0] * 32]
    with pytest.raises(RewardError, match="returned no scored request while 1 are in flight"):
        run_async([PromptSampler(SamplerConfig())], Silent(rewards, 0))
    with pytest.raises(RewardError, match="prompt 5: rewards returned, but no request of it is in flight"):
        run_async([PromptSampler(SamplerConfig())], Stray(rewards, 0))


def test_mode_is_validated_with_its_field_name():
    assert SamplerConfig().mode == "rounds"
    with pytest.raises(ConfigError, match=r"^mode: must be one of 'rounds', 'async', got 'asynch'"):
        SamplerConfig(mode="asynch")
    with pytest.raises(ConfigError, match=r"^reinforce_ada\.mode:"):
        SamplerConfig.from_mapping({"mode": "barrier"}, prefix="reinforce_ada.")
