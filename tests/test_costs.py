"""Chapter 4's cost model: bytes per token (published configurations and a real filled cache) and
the analytical compute of a decode step."""
import pytest
import torch
from conftest import CAUSAL_TINY, load_cached

from kvutils import costs, report


@pytest.mark.parametrize("row", report.article()["table1_bytes_per_token"], ids=lambda r: r["model"])
def test_the_formula_reproduces_the_articles_table_1(row):
    per_token = costs.published_bytes(row)
    assert per_token / costs.KIB == row["kib_per_token"]
    assert per_token * costs.SEQUENCE_128K / costs.GIB == pytest.approx(row["gib_per_128k"], abs=5e-6)


@pytest.mark.parametrize("name", CAUSAL_TINY)
@pytest.mark.parametrize("seq_len", [10, 40])  # tiny-gemma3's local layers keep 15 tokens: 40 crosses it
def test_formula_equals_the_bytes_of_a_real_cache(name, seq_len):
    loaded = load_cached(name, "float32")
    ids = torch.arange(1000, 1000 + seq_len)[None]
    expected = costs.cache_bytes(loaded.config, seq_len, torch.float32)
    assert costs.real_cache_bytes(loaded, ids) == expected["held"]
    if expected["sliding_layers"] and seq_len > loaded.config.sliding_window:
        assert expected["held"] < expected["full_model_formula"]
    else:
        assert expected["held"] == expected["full_model_formula"]


def test_step_flops_by_hand_for_tiny_llama():
    loaded = load_cached("tiny-llama", "float32")
    c = loaded.config  # 2 layers, hidden 64, 4 heads of 16, 2 KV heads, MLP 128, vocab V
    per_layer = 64 * 64 + 2 * (64 * 32) + 64 * 64 + 3 * 64 * 128  # q, k, v, o, gate/up/down
    head = c.vocab_size * 64
    context = 9
    cached = 2 * (2 * per_layer + 2 * 64 * 10 * 2 + head)
    uncached = 2 * (2 * per_layer * 10 + 2 * 64 * sum(range(1, 11)) * 2 + head)
    assert costs.step_flops(loaded, context, cached=True) == cached
    assert costs.step_flops(loaded, context, cached=False) == uncached
    assert costs.step_flops(loaded, 0, True) == costs.step_flops(loaded, 0, False)  # nothing to reuse


def test_sliding_layers_attend_to_at_most_their_window():
    loaded = load_cached("tiny-gemma3", "float32")
    far, farther = (costs.step_flops(loaded, n, cached=True) for n in (100, 200))
    windows = costs._layer_windows(loaded.config)
    global_layers = sum(w is None for w in windows)
    attn_width = loaded.config.num_attention_heads * loaded.config.head_dim
    assert farther - far == 2 * 2 * attn_width * 100 * global_layers  # only global layers grow


def test_decode_step_times_and_the_bandwidth_bound_are_measured():
    loaded = load_cached("tiny-llama", "float32")
    ids = torch.arange(1000, 1064)[None]
    times = costs.decode_step_times(loaded, ids, repeats=3)
    assert times.context == 64 and times.cached_ms > 0 and times.uncached_ms > 0
    assert times.cache_bytes == costs.cache_bytes(loaded.config, 64)["held"]
    bandwidth = costs.memory_bandwidth(megabytes=64, repeats=2)
    assert 1e8 < bandwidth < 1e13  # bytes per second, anything from a slow VM to HBM
    bound = costs.bandwidth_bound_ms(loaded, 64, bandwidth)
    weights = sum(costs._matmul_weights(loaded)) * 4
    assert bound == pytest.approx(1e3 * (weights + costs.cache_bytes(loaded.config, 64)["held"]) / bandwidth)
