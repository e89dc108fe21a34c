"""Evaluation: the pass@k estimator, the tables, and checkpoint resolution (fake sampler; no vLLM)."""

import itertools
import json
from math import comb

import pandas as pd
import pytest

from reinforce_ada.tasks import evaluate


@pytest.mark.parametrize("k, c, j", [(4, 0, 1), (4, 1, 1), (4, 2, 2), (8, 3, 4), (5, 5, 3), (6, 1, 6)])
def test_pass_at_matches_brute_force(k, c, j):
    outcomes = [1] * c + [0] * (k - c)
    subsets = list(itertools.combinations(range(k), j))
    brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
    assert evaluate.pass_at(k, c, j) == pytest.approx(brute)
    assert comb(k, j) == len(subsets)


def benchmark(path, answers):
    pd.DataFrame(
        [{"data_source": "math", "prompt": [{"role": "user", "content": f"q{i}"}],
          "reward_model": {"style": "rule", "ground_truth": a}} for i, a in enumerate(answers)]
    ).to_parquet(path)


def test_tables_weight_benchmarks_by_size(tmp_path):
    benchmark(tmp_path / "a.parquet", ["1", "2"])
    benchmark(tmp_path / "b.parquet", ["3", "4", "5", "6"])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_text("")

    def factory(path):
        # answers 1 to every q0 and 4 to everything else: right for a.q0 and b.q1 only
        return lambda prompts, k: [["\\boxed{1}" if p[0]["content"] == "q0" else "\\boxed{4}"] * k for p in prompts]

    results = evaluate.main(
        ["--checkpoint", str(model), "--benchmark", f"a={tmp_path / 'a.parquet'}", "--benchmark",
         f"b={tmp_path / 'b.parquet'}", "--k", "4", "--output", str(tmp_path / "eval")],
        sampler_factory=factory,
    )[str(model)]
    assert results["benchmarks"]["a"]["avg"] == 0.5  # q0 -> 1 right, q1 -> 4 wrong
    assert results["benchmarks"]["b"]["avg"] == 0.25  # q1 -> 4 right
    assert results["weighted"]["avg"] == pytest.approx((0.5 * 2 + 0.25 * 4) / 6)
    saved = json.loads((tmp_path / "eval" / "results.json").read_text())
    assert saved["settings"]["k"] == 4
    assert "| a Avg@4 | b Avg@4 |" in (tmp_path / "eval" / "results.md").read_text()


def test_unknown_checkpoint_layout_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="--checkpoint"):
        evaluate.hf_folder(tmp_path)


def fsdp_checkpoint(tmp_path, world_size: int = 1):
    """A verl FSDP actor checkpoint of the tiny model as one rank saves it (DTensors on a one-rank mesh, the
    Hugging Face config and tokenizer beside them), each weight moved by 2e-5 from the tiny model's: an update that
    float32 holds and bfloat16 mostly rounds away."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reinforce_ada.tools import tiny

    model_dir = tiny.build(tmp_path / "tiny", train=4, test=2) / "model"
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    actor = tmp_path / "global_step_3" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    model.config.save_pretrained(actor / "huggingface")
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(actor / "huggingface")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world_size}))
    trained = {k: v + 2e-5 for k, v in model.state_dict().items()}
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))  # as verl's FSDP workers name it
        torch.save({k: distribute_tensor(v, mesh, [Shard(0)]) for k, v in trained.items()},
                   actor / f"model_world_size_{world_size}_rank_0.pt")
    finally:
        dist.destroy_process_group()
    return actor.parent, trained


def test_a_float32_merge_keeps_the_weights_as_trained_where_verls_merger_rounds_them(tmp_path):
    import torch
    from safetensors.torch import load_file

    checkpoint, trained = fsdp_checkpoint(tmp_path)
    merged = evaluate.hf_folder(checkpoint, dtype="float32")
    assert merged == checkpoint / "actor" / "merged_hf_float32" and (merged / "tokenizer.json").exists()
    written = load_file(merged / "model.safetensors")
    assert written and all(torch.equal(written[k], trained[k]) for k in written)
    assert evaluate.hf_folder(checkpoint, dtype="float32") == merged  # merged once
    # verl's merger (the default, unchanged) writes bfloat16: the update is lost from most weights
    rounded = load_file(evaluate.hf_folder(checkpoint) / "model.safetensors")
    assert set(rounded) == set(written) and all(v.dtype == torch.bfloat16 for v in rounded.values())
    assert not all(torch.equal(rounded[k].float(), trained[k]) for k in rounded)
    assert not list(checkpoint.glob("actor/*.partial"))
    # a checkpoint whose training states were removed once merged (a learning study's start) is still found
    for shard in checkpoint.glob("actor/model_world_size_*_rank_*.pt"):
        shard.unlink()
    assert evaluate.hf_folder(checkpoint, dtype="float32") == merged
    assert evaluate.hf_folder(checkpoint) == checkpoint / "actor" / "merged_hf"


def test_a_float32_merge_of_a_checkpoint_saved_by_several_ranks_is_refused_by_name(tmp_path):
    checkpoint, _ = fsdp_checkpoint(tmp_path, world_size=2)
    with pytest.raises(ValueError, match="saved by one rank .* world size \\[2\\]; merge it with verl's model merger"):
        evaluate.hf_folder(checkpoint, dtype="float32")
