"""The embedded models are the real, trained ones: they load from their packages with the published
weights, and a real sentence is far likelier under them than chance."""
import pytest
import torch

import kvutils
from kvutils.models import registry as models


@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m", "minilm-l6"])
def test_embedded_models_load_real_weights(name):
    loaded = kvutils.load(name)
    assert loaded.family == models.EMBEDDED[name].family
    assert len(loaded.source_sha256) == 64  # the published hash of the weight file
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
    expected_layers = {"gemma3-270m": 18, "smollm2-135m": 30, "minilm-l6": 6}[name]
    assert loaded.n_layers == expected_layers
    if loaded.family == "causal":  # trained weights: a real sentence is far likelier than chance
        ids = loaded.tokenizer("The capital of France is Paris.", return_tensors="pt").input_ids
        with torch.inference_mode():
            loss = loaded.model(ids, labels=ids).loss.item()
        assert loss < 0.5 * torch.log(torch.tensor(float(len(loaded.tokenizer)))).item()
