"""The `reinforce_ada` estimator inside verl's registry, checked against verl's own GRPO."""

import importlib
from collections import defaultdict

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from reinforce_ada.core.advantage import PoolStats


def random_batch(seed, num_prompts=6, group=4, length=7, binary=True):
    g = torch.Generator().manual_seed(seed)
    bs = num_prompts * group
    uids = np.array([f"prompt-{i // group}" for i in range(bs)], dtype=object)
    perm = torch.randperm(bs, generator=g)  # verl reorders samples; groups are found by uid
    uids = uids[perm.numpy()]
    lengths = torch.randint(1, length + 1, (bs,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).float()
    scores = (torch.rand(bs, generator=g) > 0.5).float() if binary else torch.randn(bs, generator=g)
    rewards = torch.zeros(bs, length)
    rewards[torch.arange(bs), lengths - 1] = scores  # outcome reward on the last response token
    return rewards, mask, uids


def publish_own_groups(rewards, uids):
    from reinforce_ada.integration.handover import publish_pools

    scores = defaultdict(list)
    for uid, score in zip(uids, rewards.sum(-1).tolist()):
        scores[uid].append(score)
    publish_pools({u: PoolStats.from_rewards(s) for u, s in scores.items()})


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("binary", [True, False])
def test_equals_verl_grpo_when_the_pool_is_the_group(restore_verl_registries, seed, norm, binary):
    from verl.trainer.ppo import core_algos

    import reinforce_ada.integration.estimator  # noqa: F401

    rewards, mask, uids = random_batch(seed, binary=binary)
    config = OmegaConf.create({"norm_adv_by_std_in_grpo": norm})
    grpo, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, uids, norm_adv_by_std_in_grpo=norm)
    publish_own_groups(rewards, uids)
    ours, returns = core_algos.get_adv_estimator_fn("reinforce_ada")(
        token_level_rewards=rewards, response_mask=mask, index=uids, config=config
    )
    torch.testing.assert_close(ours, grpo, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(returns, ours)


def test_baseline_comes_from_the_pool_not_the_kept_group(restore_verl_registries):
    from verl.trainer.ppo import core_algos

    from reinforce_ada.integration.handover import publish_pools

    # kept 2 correct + 2 wrong out of a pool of 32 with 4 correct: baseline 1/8, not 1/2
    publish_pools({"p": PoolStats.from_rewards([1.0] * 4 + [0.0] * 28)})
    uids = np.array(["p"] * 4, dtype=object)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    adv, _ = core_algos.get_adv_estimator_fn("reinforce_ada")(
        token_level_rewards=rewards, response_mask=mask, index=uids, config={"norm_adv_by_std_in_grpo": False}
    )
    expected = torch.tensor([[0.875, 0.875], [0.875, 0.875], [-0.125, -0.125], [-0.125, 0.0]])
    torch.testing.assert_close(adv, expected)


def test_prompt_weight_scales_the_advantages(restore_verl_registries):
    from reinforce_ada.integration.estimator import compute_reinforce_ada_outcome_advantage
    from reinforce_ada.integration.handover import publish_pools

    publish_pools({"p": PoolStats.from_rewards([1.0] + [0.0] * 7, weight=8.0)})
    uids = np.array(["p"] * 2, dtype=object)
    adv, _ = compute_reinforce_ada_outcome_advantage(
        torch.tensor([[1.0], [0.0]]), torch.ones(2, 1), index=uids, config={"norm_adv_by_std_in_grpo": False}
    )
    torch.testing.assert_close(adv, torch.tensor([[7.0], [-1.0]]))


def test_samples_without_published_pools_are_refused_with_the_fix(restore_verl_registries):
    from reinforce_ada.integration.estimator import compute_reinforce_ada_outcome_advantage
    from reinforce_ada.integration.handover import publish_pools

    publish_pools({"b": PoolStats.from_rewards([1.0, 0.0])})
    with pytest.raises(ValueError, match="reinforce_ada.enable=true"):
        compute_reinforce_ada_outcome_advantage(torch.ones(2, 3), torch.ones(2, 3), index=np.array(["a", "a"]))


def test_padding_rows_need_no_pool_and_get_zero_advantage(restore_verl_registries):
    from reinforce_ada.integration.estimator import compute_reinforce_ada_outcome_advantage
    from reinforce_ada.integration.handover import publish_pools

    publish_pools({"p": PoolStats.from_rewards([1.0, 0.0])})
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    adv, _ = compute_reinforce_ada_outcome_advantage(
        torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.0]]), mask, index=np.array(["p", "p", "pad0"], dtype=object),
        config={"norm_adv_by_std_in_grpo": False},
    )
    torch.testing.assert_close(adv, torch.tensor([[0.5, 0.5], [-0.5, 0.0], [0.0, 0.0]]))


def test_registration_is_idempotent_and_survives_reload(restore_verl_registries):
    from verl.trainer.ppo import core_algos

    import reinforce_ada.integration.estimator as est

    est.register()
    est.register()
    reloaded = importlib.reload(est)  # a new function object under the same name
    assert core_algos.get_adv_estimator_fn("reinforce_ada") is reloaded.compute_reinforce_ada_outcome_advantage


def test_a_foreign_estimator_under_our_name_is_not_overwritten(restore_verl_registries):
    import reinforce_ada.integration.estimator as est

    restore_verl_registries["reinforce_ada"] = lambda **kw: None
    with pytest.raises(ValueError, match="another advantage estimator"):
        est.register()


def test_registry_fixture_restores_verl_state(restore_verl_registries):
    from verl.trainer.ppo import core_algos

    before = dict(core_algos.ADV_ESTIMATOR_REGISTRY)
    core_algos.ADV_ESTIMATOR_REGISTRY.pop("reinforce_ada", None)
    core_algos.ADV_ESTIMATOR_REGISTRY["scratch"] = object()
    restore_verl_registries.clear()
    restore_verl_registries.update(before)
    assert dict(core_algos.ADV_ESTIMATOR_REGISTRY) == before


@pytest.mark.slow
def test_import_verl_loads_the_plugin_in_a_fresh_process():
    """verl's entry-point discovery registers the estimator; nothing else is needed."""
    import subprocess
    import sys

    code = (
        "import verl\n"
        "from verl.trainer.ppo.core_algos import get_adv_estimator_fn, ADV_ESTIMATOR_REGISTRY\n"
        "fn = get_adv_estimator_fn('reinforce_ada')\n"
        "print(fn.__module__, 'grpo' in ADV_ESTIMATOR_REGISTRY or 'grpo_vectorized' in ADV_ESTIMATOR_REGISTRY)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["reinforce_ada.integration.estimator", "True"]


def test_the_downsampling_correction_weighs_each_outcome(restore_verl_registries):
    from reinforce_ada.core.advantage import StratumWeights
    from reinforce_ada.integration.estimator import compute_reinforce_ada_outcome_advantage
    from reinforce_ada.integration.handover import publish_pools

    stats = PoolStats.from_rewards([1.0] + [0.0] * 7)
    publish_pools({"p": PoolStats(stats.count, stats.mean, stats.m2, strata=StratumWeights(0.7, 0.5, 7 / 6))})
    adv, _ = compute_reinforce_ada_outcome_advantage(
        torch.tensor([[1.0], [0.0]]), torch.ones(2, 1), index=np.array(["p", "p"], dtype=object),
        config={"norm_adv_by_std_in_grpo": False},
    )
    torch.testing.assert_close(adv, torch.tensor([[7 / 8 * 0.5], [-1 / 8 * 7 / 6]]))
