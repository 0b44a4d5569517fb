"""The model registry: bad names fail clearly, a reader's own model folder loads, tiny models are
reproducible, a converted model is reused (tests/signal/test_embedded_models.py loads the real ones)."""
import json

import pytest
import torch
from conftest import load_cached

import kvutils
from kvutils.core import data
from kvutils.models import converted
from kvutils.models.checks import parse_model_list, resolve
from kvutils.models.loading import as_dtype, load_tokenizer
from kvutils.models.registry import ModelNotAvailable


def test_unknown_model_names_the_parameter_and_the_choices():
    with pytest.raises(ValueError, match=r"models: unknown model 'gpt-17'.*gemma3-270m.*smollm2-135m"):
        resolve("gpt-17")


def test_hub_id_without_local_weights_says_how_to_get_them(tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))  # an empty hub cache
    with pytest.raises(ModelNotAvailable, match=r"EleutherAI/pythia-160m.*hf download EleutherAI/pythia-160m"):
        resolve("EleutherAI/pythia-160m")


def test_local_dir_without_safetensors_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ModelNotAvailable, match="safetensors"):
        resolve(str(tmp_path))


def test_local_dir_with_weights_loads(tmp_path):
    """A reader's own model directory: saved tiny model -> resolve -> load gives the same logits."""
    tiny = load_cached("tiny-llama", "float32")
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    resolved = resolve(str(tmp_path))
    assert (resolved.kind, resolved.family, resolved.context) == ("hf", "causal", 512)
    again = kvutils.load(str(tmp_path))
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.inference_mode():
        torch.testing.assert_close(again.model(ids).logits, tiny.model(ids).logits, rtol=0, atol=0)


@pytest.mark.parametrize("bad", ["float16", "bfloat16", "int8"])
def test_unsupported_dtype(bad):
    with pytest.raises(ValueError, match=r"dtype.*float32, float64"):
        as_dtype(bad)


def test_model_list_parsing():
    assert parse_model_list(" gemma3-270m, smollm2-135m ") == ["gemma3-270m", "smollm2-135m"]
    with pytest.raises(ValueError, match="models is empty"):
        parse_model_list(" , ")
    with pytest.raises(ValueError, match="twice"):
        parse_model_list("tiny-llama,tiny-llama")


@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m", "qwen2.5-0.5b", "minilm-l6"])
def test_all_study_words_are_single_tokens(name):
    data.check_words_for_tokenizer(data.load_senses(), load_tokenizer(name), name)


def test_tiny_models_are_reproducible():
    a, b = kvutils.load("tiny-qwen3"), kvutils.load("tiny-qwen3")
    for (na, pa), (nb, pb) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert na == nb and torch.equal(pa, pb)


def test_converted_cache_is_reused(monkeypatch):
    """The second load reads the cached safetensors instead of converting the GGUF again."""
    converted.converted_dir("smollm2-135m")
    monkeypatch.setattr(converted, "gguf_source", lambda entry: pytest.fail("converted again"))
    assert (converted.converted_dir("smollm2-135m") / "model.safetensors").is_file()
