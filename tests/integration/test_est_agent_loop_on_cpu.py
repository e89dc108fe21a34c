"""Est and warm start in the V1 manager, on the fake rollout of test_agent_loop_on_cpu (no Ray, no vLLM)."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from reinforce_ada.core.config import SamplerConfig
from reinforce_ada.core.tracker import PassRateTracker, prompt_identity
from reinforce_ada.integration.checkpoint import save_tracker

from test_agent_loop_on_cpu import REWARDS, UIDS, published, v1_manager  # noqa: F401 (fixture)

MESSAGES = {u: [{"role": "user", "content": f"question {u}"}] for u in UIDS}
KEYS = {u: prompt_identity(MESSAGES[u], "fake") for u in UIDS}


def prompts_with_messages(step):
    from verl.utils import tensordict_utils as tu

    raw = np.empty(len(UIDS), dtype=object)
    raw[:] = [MESSAGES[u] for u in UIDS]
    batch = tu.get_tensordict(
        {
            "input_ids": torch.zeros(len(UIDS), 3, dtype=torch.long),
            "uid": np.array(UIDS, dtype=object),
            "raw_prompt": raw,
            "data_source": np.array(["fake"] * len(UIDS), dtype=object),
        }
    )
    tu.assign_non_tensor_data(batch, "global_steps", step)
    return batch


def test_est_makes_one_request_of_the_allocation_and_keeps_everything(published, capsys):  # noqa: F811
    from reinforce_ada.integration.handover import pop_step_metrics

    manager = v1_manager(SamplerConfig(variant="est"))
    manager.tracker.update(KEYS["never"], 16, 0)  # hard: gets the most
    manager.tracker.update(KEYS["easy"], 16, 16)  # easy: N_min
    manager.generate_sequences(prompts_with_messages(step=1))
    (request,) = manager.requests  # a single request, no rounds
    counts = [request[u][0] for u in UIDS]
    assert sum(counts) == 4 * len(UIDS) and counts[0] == 2 and counts[2] == max(counts)
    assert all(request[u][1] == 0 for u in UIDS)
    assert manager.cleared == []  # no downsampling
    assert published["never"].count == counts[2] and published["never"].weight == pytest.approx(10.0)  # mean 0
    late_mean = sum(REWARDS["late"][: counts[1]]) / counts[1]
    assert published["late"].weight == pytest.approx(1 / max(late_mean, 0.01) ** 0.5)
    metrics = pop_step_metrics()
    assert metrics["reinforce_ada/kept_samples"] == 12 and metrics["reinforce_ada/first_request_max"] == counts[2]
    assert metrics["reinforce_ada/tracker/prompts_seen_before"] == 2
    assert "step 1 allocation: " + " ".join(map(str, counts)) in capsys.readouterr().err
    # the tracker learned from every sample drawn
    assert manager.tracker.counts(KEYS["late"]) == (counts[1], sum(REWARDS["late"][: counts[1]]))


def test_warm_start_sizes_known_prompts_and_the_tracker_learns_in_seq(published):  # noqa: F811
    manager = v1_manager(SamplerConfig(variant="balance", warm_start=True))
    manager.tracker.update(KEYS["never"], 8, 0)  # p_hat 0.1: first request 20
    manager.generate_sequences(prompts_with_messages(step=1))
    first = manager.requests[0]
    assert first["never"] == (20, 0) and first["easy"] == (8, 0) and first["late"] == (8, 0)
    assert manager.requests[1]["never"] == (8, 20)  # then plain rounds of M
    plain = v1_manager(SamplerConfig())
    plain.generate_sequences(prompts_with_messages(step=1))
    assert plain.tracker.counts(KEYS["never"]) == (32, 0)  # Seq without warm start still feeds the tracker


def test_est_without_prompt_messages_is_refused(published):  # noqa: F811
    from test_agent_loop_on_cpu import v1_prompts

    with pytest.raises(RuntimeError, match="raw_prompt"):
        v1_manager(SamplerConfig(variant="est")).generate_sequences(v1_prompts())


def test_first_step_of_a_resumed_run_restores_the_saved_tracker(published, tmp_path, capsys):  # noqa: F811
    saved = PassRateTracker()
    saved.update(KEYS["never"], 32, 0)
    save_tracker(saved, str(tmp_path / "global_step_4"), 4)
    manager = v1_manager(SamplerConfig(variant="est"))
    manager._tracker_checked = False
    manager.config = OmegaConf.create({"trainer": {"resume_mode": "auto", "default_local_dir": str(tmp_path)}})
    manager.generate_sequences(prompts_with_messages(step=5))
    assert "tracker of 1 prompts restored from" in capsys.readouterr().err
    assert manager.tracker.counts(KEYS["never"])[0] == pytest.approx(0.5 * 32 + manager.requests[0]["never"][0])
    assert manager.requests[0]["never"][0] > 4  # allocated from the restored estimate


@pytest.mark.parametrize("folder_seen", [True, False])
def test_resumed_run_without_a_saved_tracker_warns_and_starts_empty(published, tmp_path, capsys,  # noqa: F811
                                                                      folder_seen):
    if folder_seen:
        (tmp_path / "global_step_2").mkdir()  # verl's checkpoint without our file
    manager = v1_manager(SamplerConfig(variant="est"))
    manager._tracker_checked = False
    manager.config = OmegaConf.create({"trainer": {"resume_mode": "auto", "default_local_dir": str(tmp_path)}})
    manager.generate_sequences(prompts_with_messages(step=3))
    warning = capsys.readouterr().err
    if folder_seen:
        assert "holds no pass-rate tracker" in warning
    else:  # the checkpoint is on another node's disk
        assert "does not see: on several nodes trainer.default_local_dir must be storage every node mounts" in warning
    assert [manager.requests[0][u][0] for u in UIDS] == [4, 4, 4]
