"""Hypothesis strategies that the core's property tests share: random valid sampler settings, and
reward tables indexed by (prompt, pool index) so that every schedule draws the same rewards."""

import math

from hypothesis import strategies as st

from reinforce_ada.core.config import SamplerConfig


@st.composite
def sampler_configs(
    draw, variants=("balance", "pos"), n=(1, 8), round_size=(1, 10), rounds=(1, 6), caps=True, selections=True,
    budgets=False, min_samples=None,
):
    """Valid settings over the given ranges; n <= N_max always holds.

    Args:
        variants: Exit rules to draw from (``est`` gets its own valid settings).
        n, round_size, rounds: Inclusive ranges of n, M and R.
        caps: Also draw ``max_samples_per_prompt`` (None or at least n).
        selections: Also draw ``selection`` and ``selection_seed``.
        budgets: Also draw ``sample_budget`` in [1, 5] and ``mode``.
        min_samples: Est's ``min_samples_per_prompt``, capped at n (None: the default).
    """
    variant = draw(st.sampled_from(variants))
    group = draw(st.integers(*n))
    size = draw(st.integers(*round_size))
    values = {"n": group, "round_size": size, "max_rounds": max(draw(st.integers(*rounds)), math.ceil(group / size)),
              "variant": variant}
    if min_samples is not None:
        values["min_samples_per_prompt"] = min(min_samples, group)
    if variant != "est":
        if caps:
            most = size * values["max_rounds"] + 5
            values["max_samples_per_prompt"] = draw(st.one_of(st.none(), st.integers(group, most)))
        values["unresolved"] = draw(st.sampled_from(["keep", "drop"]))
        if selections:
            values["selection"] = draw(st.sampled_from(["first", "random"]))
            values["selection_seed"] = draw(st.integers(0, 3))
    if budgets:
        values["sample_budget"] = draw(st.floats(1.0, 5.0))
        values["mode"] = draw(st.sampled_from(["rounds", "async"]))
    return SamplerConfig(**values)


def reward_tables(values, length: int, max_prompts: int):
    """Per prompt, the rewards of its samples in pool order (a prompt's i-th sample always gets the same one)."""
    return st.lists(st.lists(st.sampled_from(values), min_size=length, max_size=length), min_size=1,
                    max_size=max_prompts)
