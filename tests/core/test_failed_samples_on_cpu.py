"""Failed samples in the core: redrawn once, then the prompt stops; nothing drawn is lost."""

import math
import random
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.groups import form_group
from reinforce_ada.core.metrics import summarize
from reinforce_ada.core.sampler import FAILED, PromptSampler, RewardError
from reinforce_ada.core.schedules import run_rounds
from reinforce_ada.core.step import run_step

import strategies

X = FAILED


CONFIGS = strategies.sampler_configs(
    ("balance", "pos", "est"), n=(1, 6), round_size=(1, 8), rounds=(1, 5),
    caps=False, selections=False, min_samples=1
)


def test_a_failed_sample_is_redrawn_by_the_next_request_which_is_not_a_round():
    sampler = PromptSampler(SamplerConfig(n=4, round_size=8, max_rounds=2))
    sampler.record([0, 0, X, 0, 0, 0, 0, 0])
    assert (sampler.drawn, sampler.rounds, sampler.samples_failed, sampler.next_request()) == (7, 1, 1, 1)
    sampler.record([1])  # the redraw
    assert (sampler.drawn, sampler.rounds, sampler.failed, sampler.next_request()) == (8, 1, False, 8)
    sampler.record([1, 0, 0, 0, 0, 0, 0, 0])
    assert sampler.resolved and sampler.rewards == [0] * 7 + [1, 1] + [0] * 7


def test_a_failed_redraw_fails_the_prompt_which_keeps_what_it_drew():
    config = SamplerConfig(n=4, round_size=8, max_rounds=4)
    sampler = PromptSampler(config)
    sampler.record([0, X, X, 0, 1, 0, 0, 0])
    sampler.record([X, 0])
    assert sampler.failed and sampler.finished and not sampler.resolved and sampler.next_request() == 0
    assert (sampler.drawn, sampler.samples_failed) == (7, 3)
    group = form_group(sampler)
    assert not group.dropped and len(group.kept) == 4  # unresolved="keep": n of its 7 samples
    assert group.stats.count == 7 and group.stats.mean == pytest.approx(1 / 7)
    drop = PromptSampler(SamplerConfig(n=4, unresolved="drop"))
    drop.record([0, X, X, 0, 1, 0, 0, 0])
    drop.record([X, 0])
    assert form_group(drop).dropped


def test_a_failed_prompt_with_fewer_than_n_samples_is_dropped_and_an_empty_one_has_no_stats():
    sampler = PromptSampler(SamplerConfig(n=4, round_size=4, max_rounds=2))
    sampler.record([1, X, X, 0])
    sampler.record([X, X])
    group = form_group(sampler)
    assert group.dropped and group.kept == [] and group.stats.count == 2
    empty = PromptSampler(SamplerConfig(n=2, round_size=2, max_rounds=1))
    empty.record([X, X])
    empty.record([X, X])
    assert form_group(empty).dropped and form_group(empty).stats is None


def test_no_redraw_once_the_rule_holds():
    sampler = PromptSampler(SamplerConfig(n=4, round_size=8))
    sampler.record([1, 0, 1, X, 0, 0, 0, 0])
    assert sampler.resolved and sampler.finished and sampler.samples_failed == 1 and not sampler.failed


def test_est_redraws_its_failed_samples_and_trains_on_every_one_it_has():
    config = SamplerConfig(n=4, variant="est", max_rounds=1)
    sampler = PromptSampler(config, first_request=6)
    sampler.record([1, X, 0, X, 0, 1])
    assert not sampler.finished and sampler.next_request() == 2
    sampler.record([0, X])
    assert sampler.finished and sampler.failed and form_group(sampler).kept == [0, 1, 2, 3, 4]


def test_malformed_rewards_are_still_errors():
    sampler = PromptSampler(SamplerConfig())
    for bad in (math.nan, math.inf, "1", True):
        with pytest.raises(RewardError, match="finite number"):
            sampler.record([0.0] * 7 + [bad])


def scripted(answers):
    """A round generator that answers each prompt's k-th request with ``answers[prompt][k]``."""
    calls = defaultdict(int)

    def generate(requests):
        out = {p: answers[p][calls[p]][:c] for p, c in requests.items()}
        for p in requests:
            calls[p] += 1
        return out

    return generate


def test_step_metrics_count_failed_samples_and_prompts():
    generate = scripted({0: [[1, 0, X, 1, 0, 0, 0, 0]], 1: [[X] * 8, [X] * 8]})
    result = run_step(["a", "b"], SamplerConfig(n=4, round_size=8), generate)
    metrics = result.metrics()
    assert metrics["samples_failed"] == 1 + 16 and metrics["prompts_failed"] == 1
    assert metrics["samples_total"] == 7 and metrics["prompts_dropped"] == 1
    assert metrics["kept_samples"] == 4


# rewards per (prompt, attempt): a prompt's i-th sample asked for, failed or not, always gets the same outcome
attempt_tables = strategies.reward_tables([0.0, 1.0, 1.0, 0.0, X], length=90, max_prompts=8)


class Engine:
    """Answers requests from the attempt table, in rounds or one request at a time in a random order."""

    def __init__(self, table, seed=0):
        self.table, self.asked = table, defaultdict(int)
        self.rng, self.in_flight = random.Random(seed), {}

    def draw(self, prompt, count):
        start = self.asked[prompt]
        self.asked[prompt] += count
        return self.table[prompt][start : start + count]

    def __call__(self, requests):
        return {p: self.draw(p, c) for p, c in requests.items()}

    def submit(self, prompt, count):
        self.in_flight[prompt] = self.draw(prompt, count)

    def wait(self):
        done = self.rng.sample(sorted(self.in_flight), self.rng.randint(1, len(self.in_flight)))
        return [(p, self.in_flight.pop(p)) for p in done]


@settings(max_examples=150, deadline=None)
@given(CONFIGS, attempt_tables, st.integers(0, 3))
def test_with_failures_every_prompt_finishes_within_its_budget_and_async_matches_rounds(config, table, seed):
    keys = [f"p{i}" for i in range(len(table))]
    rounds = run_step(keys, config, Engine(table))
    asynchronous = run_step(keys, SamplerConfig(**{**config.__dict__, "mode": "async"}), Engine(table, seed))
    for i, (s, a) in enumerate(zip(rounds.samplers, asynchronous.samplers)):
        assert (s.rewards, s.samples_failed, s.failed, s.resolved) == (
            a.rewards,
            a.samples_failed,
            a.failed,
            a.resolved,
        )
        attempts = s.drawn + s.samples_failed
        assert s.rewards == [r for r in table[i][:attempts] if r is not X]  # every good sample kept, in order
        assert s.drawn <= config.n_max and s.finished
        assert s.failed or s.resolved or s.rounds == config.max_rounds or s.drawn == config.n_max
    for s, g in zip(rounds.samplers, rounds.groups):
        if not g.dropped:  # an empty step's zero-weight groups take all of a pool smaller than n
            whole_pool = config.variant == "est" or (rounds.empty and s.drawn < config.n)
            assert len(g.kept) == (s.drawn if whole_pool else config.n)
            assert not rounds.empty or g.stats.weight == 0
    assert summarize(rounds.samplers, rounds.groups) == summarize(asynchronous.samplers, asynchronous.groups)


def test_run_rounds_redraws_in_the_next_round():
    samplers = [PromptSampler(SamplerConfig(n=2, round_size=2, max_rounds=1)) for _ in range(2)]
    log = []
    answers = iter([{0: [1, X], 1: [1, 0]}, {0: [0]}])

    def generate(requests):
        log.append(dict(requests))
        return next(answers)

    assert run_rounds(samplers, generate) == 2
    assert log == [{0: 2, 1: 2}, {0: 1}] and samplers[0].rewards == [1, 0]


def test_the_rounds_metric_counts_redraw_rounds_and_matches_the_round_timings():
    generate = scripted({0: [[1, 0, X, 1], [0]], 1: [[0, 0, 0, 0]] * 2})
    result = run_step(["a", "b"], SamplerConfig(n=4, round_size=4, max_rounds=2), generate)
    assert result.metrics()["rounds"] == len(result.round_seconds) == 2
    assert [s.requests for s in result.samplers] == [2, 2] and result.samplers[0].rounds == 1
