"""The gradient-quality study: sketches preserve inner products, the reference gradient is unbiased, and the
replays measure what they should on pools whose gradients are known."""

import json

import numpy as np
import pytest

from studies.gradient_quality import design, pools, replay, sketches
from studies.gradient_quality import measure as gq
from studies.gradient_quality import report as gq_report


def test_the_pass_rate_gradient_is_unbiased_for_known_score_functions():
    # responses whose score function is +g for correct and -g * p / (1 - p) for incorrect ones: grad p = p g
    rng = np.random.default_rng(0)
    p, g = 0.3, np.array([1.0, -2.0, 0.5])
    estimates = []
    for _ in range(4000):
        rewards = (rng.random(16) < p).astype(float)
        grads = np.where(rewards[:, None] > 0, g, -g * p / (1 - p))
        estimates.append(replay.pass_rate_gradient(rewards, grads))
    assert np.mean(estimates, axis=0) == pytest.approx(p * g, abs=0.01)


def test_a_count_sketch_keeps_inner_products_in_expectation():
    import torch

    model = torch.nn.Linear(64, 64)
    a, b = torch.randn(64 * 64 + 64), torch.randn(64 * 64 + 64)
    products = []
    for seed in range(200):
        sketch = sketches.Sketch(model, dims=256, seed=seed)
        sketched = []
        for vector in (a, b):
            model.weight.grad, model.bias.grad = vector[:4096].view(64, 64).clone(), vector[4096:].clone()
            sketched.append(sketch.of_gradients())
        products.append(float(sketched[0] @ sketched[1]))
    assert np.mean(products) == pytest.approx(float(a @ b), abs=4 * np.std(products) / np.sqrt(200))


def synthetic_pools(count: int, k: int, dims: int, seed: int) -> list[dict]:
    """Prompts with pass rates in (0, 1) and per-response gradients +g_x / -g_x p/(1-p) plus noise, g_x shared
    direction d plus a prompt's own part."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=dims)
    rows = []
    for _ in range(count):
        p = rng.uniform(0.05, 0.6)
        g = shared + rng.normal(size=dims)
        rewards = (rng.random(k) < p).astype(float)
        grads = np.where(rewards[:, None] > 0, g, -g * p / (1 - p)) + rng.normal(scale=2.0, size=(k, dims))
        rows.append({"rewards": rewards, "grads": grads, "tokens": rng.integers(5, 30, size=k).astype(float)})
    return rows


SMALL = design.Size(train_prompts=12, train_k=64, heldout_prompts=6, heldout_k=16, dims=32, batch=4, batches=6,
                    replays_per_batch=3, group=2)
TINY = design.Size(train_prompts=8, train_k=64, heldout_prompts=4, heldout_k=8, dims=16, batch=4, batches=4,
                   replays_per_batch=2, group=2)


def test_the_replays_measure_every_method_on_the_same_batches():
    size = SMALL
    train, heldout = synthetic_pools(12, 64, 32, 0), synthetic_pools(6, 16, 32, 1)
    result = replay.analyse(train, heldout, size, [0.3] * 12)
    matched = result["matched"]["balance"]
    assert set(result["methods"]) == {*design.FIRST.candidates, "grpo_n4", "grpo_n8", "grpo_n16", matched}
    assert 4 <= int(matched.removeprefix("grpo_n")) <= 32
    for name, m in result["methods"].items():
        for key in ("cos_train", "cos_heldout", "gain", "snr"):
            value, low, high = m[key]
            assert low <= value <= high or np.isclose(low, high), (name, key)
        assert -1 <= m["cos_train"][0] <= 1
    grpo4, grpo16 = result["methods"]["grpo_n4"], result["methods"]["grpo_n16"]
    assert grpo4["samples_per_prompt"] == 4 and grpo16["samples_per_prompt"] == 16
    assert grpo16["cos_train"][0] > grpo4["cos_train"][0]  # four times the samples: a better estimate
    assert result["methods"]["balance_budget2"]["samples_per_prompt"] <= 8
    assert -1 <= result["reliability"]["train_split_half"] <= 1


def test_the_report_tables_every_method_with_its_interval(tmp_path):
    size = TINY
    result = replay.analyse(synthetic_pools(8, 64, 16, 2), synthetic_pools(4, 8, 16, 3), size, [0.3] * 8)
    ckpt = {**result, "size": vars(size), "date": "2026-12-03", "machine": "test", "wall_hours": 0.1, "command": "x"}
    text = gq_report.report({"checkpoints": {"base": ckpt}})
    assert "### Checkpoint: base" in text and "| balance_stratified |" in text and "Spearman-Brown" in text
    json.dumps(ckpt)  # what the harness saves


def test_report_only_rewrites_the_section_from_the_json_with_todays_command(tmp_path, monkeypatch):
    """The recorded command is history; the section quotes the one a reader runs today, with the same flags."""
    assert gq_report.rerun_command("python -m benchmarks.gradient_quality --checkpoints base --write "
                                   "benchmarks/RESULTS.md --json=old.json --quick", "studies/gradient_quality/README.md"
                                   ) == ("python -m studies.gradient_quality --checkpoints base --quick --write "
                                         "studies/gradient_quality/README.md")
    size = TINY
    result = replay.analyse(synthetic_pools(8, 64, 16, 2), synthetic_pools(4, 8, 16, 3), size, [0.3] * 8)
    ckpt = {**result, "size": vars(size), "date": "2026-12-03", "machine": "test", "wall_hours": 0.1,
            "command": "python -m benchmarks.gradient_quality --checkpoints base --write benchmarks/RESULTS.md"}
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"checkpoints": {"base": ckpt}}))
    monkeypatch.setattr(gq, "learning_sets", lambda *a: pytest.fail("--report-only measured"))
    write = tmp_path / "README.md"
    gq.main(["--report-only", "--json", str(results), "--write", str(write)])
    text = write.read_text()
    assert "_Measured 2026-12-03 on test._" in text and "| balance_stratified |" in text
    assert f"Command: `python -m studies.gradient_quality --checkpoints base --write {write}`" in text
    assert json.loads(results.read_text())["checkpoints"]["base"]["command"] == ckpt["command"]  # history stays
    with pytest.raises(SystemExit):
        gq.main(["--report-only", "--json", str(tmp_path / "none.json")])


def test_pools_and_sketches_are_made_once_resume_and_grow(tmp_path):
    """The tiny model: pools from a scripted sampler (the math reward scores them), then the sketched gradients;
    a second call makes nothing again; a larger size draws and sketches only what is new, by prompt."""
    from transformers import AutoTokenizer

    from reinforce_ada.tools.tiny import build

    model = build(tmp_path / "tiny", train=2, test=1) / "model"
    tokenizer = AutoTokenizer.from_pretrained(model)
    prompts = [{"prompt": [{"role": "user", "content": f"What is {i} plus 1?"}], "answer": str(i + 1)}
               for i in range(3)]
    calls = []

    def sampler(messages, k, token_ids):
        calls.append((len(messages), k))
        texts = [f"\\boxed{{{(j + len(calls)) % 3}}}" for j in range(k)]
        return [[(t, tokenizer.encode(t, add_special_tokens=False)) for t in texts] for _ in messages]

    size = design.Size(train_prompts=2, train_k=4, dims=64)
    pools.make_pools(tmp_path / "pools", model, prompts[:2], 4, size, seed=0, sampler=sampler)
    sketches.make_sketches(tmp_path / "pools", tmp_path / "sketch", model, prompts[:2], size)
    rows = replay.load_split(tmp_path / "pools", tmp_path / "sketch", prompts[:2], 4)
    assert rows[0]["rewards"].tolist() == [1.0, 0.0, 0.0, 1.0]  # "What is 0 plus 1?": only \boxed{1} is right
    assert rows[1]["grads"].shape == (4, 64) and np.abs(rows[1]["grads"]).sum() > 0
    sketch = tmp_path / "sketch" / f"grad_{pools.pool_key(prompts[0])}.npy"
    before = sketch.stat().st_mtime
    spent = pools.WallTime(tmp_path).seconds()  # the work kept, counted as it was saved
    assert spent > 0
    pools.make_pools(tmp_path / "pools", model, prompts[:2], 4, size, seed=0, sampler=sampler)
    sketches.make_sketches(tmp_path / "pools", tmp_path / "sketch", model, prompts[:2], size)
    assert calls == [(2, 4)] and sketch.stat().st_mtime == before
    assert pools.WallTime(tmp_path).seconds() == spent  # nothing made again, no time added

    # a third prompt, listed first, and 6 responses a pool: the new prompt draws 6, the others 2 more each
    grown = [prompts[2], *prompts[:2]]
    pools.make_pools(tmp_path / "pools", model, grown, 6, size, seed=0, sampler=sampler)
    sketches.make_sketches(tmp_path / "pools", tmp_path / "sketch", model, grown, size)
    assert sorted(calls[1:]) == [(1, 6), (2, 2)]
    again = replay.load_split(tmp_path / "pools", tmp_path / "sketch", grown, 6)
    for old, new in zip(rows, again[1:]):
        assert np.array_equal(new["rewards"][:4], old["rewards"]) and np.array_equal(new["grads"][:4], old["grads"])
        assert new["grads"].shape == (6, 64) and np.abs(new["grads"][4:]).sum() > 0
    # the same response sketched in the first call and in the extension has the same sketched gradient
    first, extended = again[1]["grads"][0], again[1]["grads"][5]  # both \boxed{1}, from calls 1 and 3
    assert np.allclose(first, extended, atol=1e-5)
    assert replay.load_split(tmp_path / "pools", tmp_path / "sketch", grown, 4)[1]["grads"].shape == (4, 64)
    with pytest.raises(ValueError, match="rerun to complete it"):
        replay.load_split(tmp_path / "pools", tmp_path / "sketch", grown, 8)


def test_paired_differences_are_taken_on_the_same_batches_with_intervals_over_groups_of_prompts():
    size = design.Size(train_prompts=12, train_k=64, heldout_prompts=6, heldout_k=16, dims=32, batch=4, batches=9,
                       replays_per_batch=3, group=2)
    result = replay.analyse(synthetic_pools(12, 64, 32, 4), synthetic_pools(6, 16, 32, 5), size, [0.3] * 12)
    for reference in design.FIRST.references:
        rows = result["paired"][reference]
        assert reference not in rows and set(rows) == set(result["methods"]) - {reference}
        for method, d in rows.items():
            value, low, high = d[design.PRIMARY]
            assert low <= value <= high
            # the mean of per-batch differences is the difference of the per-method means
            expected = result["methods"][method][design.PRIMARY][0] - result["methods"][reference][design.PRIMARY][0]
            assert value == pytest.approx(expected)
            # the SNR is a ratio of means over batches: its paired difference is the difference of the two ratios
            snr, snr_low, snr_high = d["snr"]
            expected = result["methods"][method]["snr"][0] - result["methods"][reference]["snr"][0]
            assert snr == pytest.approx(expected) and snr_low <= snr <= snr_high
    text = gq_report.report({"checkpoints": {"base": {**result, "size": vars(size), "date": "d", "machine": "m",
                                               "wall_hours": 0.1, "command": "x"}}})
    assert "Paired difference to grpo_n4" in text and "groups of training prompts" in text


@pytest.mark.parametrize("tied", [True, False])
def test_batched_response_sketches_equal_one_backward_per_response(tied):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                         attention_bias=not tied)  # biases as Qwen2's attention has
    model = LlamaForCausalLM(config).float()
    model.train(False)
    sketch = sketches.Sketch(model, dims=64)
    prompt = [5, 17, 3, 88, 41]
    responses = [[7], [9, 12, 30, 4, 60, 2], [50, 51], [33, 1, 90, 8]]  # right-padded to the longest
    one_by_one = []
    for ids in responses:
        model.zero_grad(set_to_none=True)
        hidden = model.model(torch.tensor([prompt + ids])).last_hidden_state[0, len(prompt) - 1:-1]
        torch.log_softmax(model.lm_head(hidden), -1).gather(1, torch.tensor(ids)[:, None]).sum().backward()
        one_by_one.append(sketch.of_gradients().clone())
    model.zero_grad(set_to_none=True)
    model.requires_grad_(False)
    batched = sketches.sketch_responses(model, sketch, prompt, responses)
    assert torch.allclose(batched, torch.stack(one_by_one), rtol=1e-4, atol=1e-6)
    assert not torch.allclose(batched[0], batched[1])


def test_the_batched_sketch_refuses_a_parameter_it_does_not_cover():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=31, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1)
    model = LlamaForCausalLM(config).float()
    model.model.scale = torch.nn.Parameter(torch.ones(1))
    sketch = sketches.Sketch(model, dims=16)
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="model.scale"):
        sketches.sketch_responses(model, sketch, [1, 2], [[3]])


def test_protocol_start_is_the_learning_protocols_own_start(tmp_path, monkeypatch):
    """Made by the learning study's own code, on the second protocol's data and sizes, in its work folder."""
    from studies.learning import data as learning_data
    from studies.learning import protocol as learning_protocol
    from studies.learning import start as learning_start

    calls = []
    monkeypatch.setattr(learning_data, "prepare_data",
                        lambda work, results, model, size, pass_range, seed: calls.append((work, results, size)) or {})
    monkeypatch.setattr(learning_start, "format_checkpoint", lambda work, base, data, size, steps:
                        calls.append((work, size, steps)) or work / "start")
    second = learning_protocol.PROTOCOLS["second"]
    assert gq.protocol_start(tmp_path, tmp_path / "base") == tmp_path / "start"
    assert calls == [(tmp_path, gq.ROOT / second.results, second.size), (tmp_path, second.size, 5)]
    calls.clear()
    gq.protocol_start(tmp_path, tmp_path / "base", quick=True)
    assert calls == [(tmp_path, tmp_path / "results", second.quick), (tmp_path, second.quick, 1)]


def test_the_equal_samples_design_runs_at_the_protocol_start_end_to_end(tmp_path, monkeypatch):
    """The tiny model as the protocol's start, a scripted sampler and seeded stand-in sketches (the tiny model's own
    are checked above): pools, the equal-samples replays, the JSON under its own key with the start's weights, and
    the section with the candidates against their GRPO."""
    import functools

    from transformers import AutoTokenizer

    from reinforce_ada.tools.tiny import build
    from studies.learning import start as learning_start

    model = build(tmp_path / "tiny", train=2, test=1) / "model"
    tokenizer = AutoTokenizer.from_pretrained(model)
    rng = np.random.default_rng(0)

    def sampler(messages, k, token_ids):
        texts = [[f"\\boxed{{{int(rng.integers(0, 4))}}}" for _ in range(k)] for _ in messages]
        return [[(t, tokenizer.encode(t, add_special_tokens=False)) for t in row] for row in texts]

    prompts = [{"prompt": [{"role": "user", "content": f"What is {i} plus 1?"}], "answer": str(i % 3 + 1),
                "base_pass_rate": 0.25} for i in range(8)]
    learning_work = tmp_path / "learning_second"
    monkeypatch.setattr("reinforce_ada.demo.run.model_folder", lambda *a: tmp_path / "base")
    monkeypatch.setattr(gq, "protocol_start", lambda work, base, quick:
                        (work, base, quick) == (learning_work, tmp_path / "base", True) and model)
    monkeypatch.setattr(gq, "learning_sets", lambda work, size, base, protocol, lw, quick:
                        (prompts[:size.train_prompts], prompts[4:4 + size.heldout_prompts]))
    monkeypatch.setattr(gq, "run_checkpoint", functools.partial(gq.run_checkpoint, sampler=sampler))

    def make_sketches(pool_folder, out, model_path, chosen, size):
        out.mkdir(parents=True, exist_ok=True)
        for prompt in chosen:
            count = len(pools.read_pool(pool_folder, prompt))
            np.save(out / f"grad_{pools.pool_key(prompt)}.npy", rng.normal(size=(count, size.dims)).astype(np.float32))
            np.save(out / f"tokens_{pools.pool_key(prompt)}.npy", rng.integers(3, 9, size=count))

    monkeypatch.setattr(gq, "make_sketches", make_sketches)
    results, write = tmp_path / "results.json", tmp_path / "README.md"
    gq.main(["--checkpoints", "protocol_start", "--design", "equal_samples", "--quick", "--work", str(tmp_path / "w"),
             "--learning-work", str(learning_work), "--json", str(results), "--write", str(write)])
    ckpt = json.loads(results.read_text())["checkpoints"]["protocol_start_equal_samples"]
    assert ckpt["design"] == "equal_samples" and ckpt["start_weights"] == learning_start.fingerprint(model)
    assert set(ckpt["paired_matched"]) == set(design.EQUAL_SAMPLES.candidates) and "decision" in ckpt
    text = write.read_text()
    assert "### Checkpoint: protocol_start, equal samples design" in text and "Decision (the design's rule)" in text
    assert ("Command: `python -m studies.gradient_quality --checkpoints protocol_start --design equal_samples "
            "--quick --work") in text
