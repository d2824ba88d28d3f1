"""The tiny causal LM and character tokenizer are built in code, saved in the Hugging Face layout and loaded back
through the same code a real local checkpoint takes, with identical outputs."""

import pytest
import torch

from embodied_rl.models.causal_lm.loading import build_tiny_causal_lm, load_causal_lm, save_causal_lm

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_tiny_model_round_trips_through_the_hugging_face_layout(tmp_path):
    model, tokenizer = build_tiny_causal_lm(seed=3)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "12+34"}], tokenize=False,
                                           add_generation_prompt=True)
    assert prompt == "Q: 12+34\nA: "
    ids = torch.tensor([tokenizer(prompt)["input_ids"]])
    save_causal_lm(model, tokenizer, tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "model.safetensors").is_file() and (tmp_path / "ckpt" / "tokenizer.json").is_file()
    loaded, loaded_tokenizer = load_causal_lm(tmp_path / "ckpt")
    assert loaded_tokenizer(prompt)["input_ids"] == ids[0].tolist()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    assert sum(p.numel() for p in model.parameters()) < 500_000  # small enough to train on a laptop CPU


def test_the_same_seed_builds_the_same_model_and_a_missing_directory_is_named(tmp_path):
    a, _ = build_tiny_causal_lm(seed=1)
    b, _ = build_tiny_causal_lm(seed=1)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_causal_lm(tmp_path)
    with pytest.raises(ValueError, match="allowed: tiny, small"):
        build_tiny_causal_lm("huge")


def test_the_tokenizer_alone_is_the_one_the_model_is_built_or_saved_with(tmp_path):
    from embodied_rl.models.causal_lm.loading import load_tokenizer

    model, tokenizer = build_tiny_causal_lm("small")
    text = "Q: 12*3\nA: <calc>12*3</calc> = 36\n"
    assert load_tokenizer("small")(text)["input_ids"] == tokenizer(text)["input_ids"]
    save_causal_lm(model, tokenizer, tmp_path / "ckpt")
    loaded = load_tokenizer(tmp_path / "ckpt")
    assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"] and loaded.chat_template == tokenizer.chat_template
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_tokenizer(tmp_path / "nothing")
