"""Chapter 4's cost model: bytes per token (published configurations and a real filled cache) and
the analytical compute of a decode step."""
import statistics

import pytest
import torch
from conftest import CAUSAL_TINY, load_cached

from kvutils.cache import costs, sizes
from kvutils.core.article import article
from kvutils.models import layers


@pytest.mark.parametrize("row", article()["table1_bytes_per_token"], ids=lambda r: r["model"])
def test_the_formula_reproduces_the_articles_table_1(row):
    per_token = sizes.published_bytes(row)
    assert per_token / sizes.KIB == row["kib_per_token"]
    assert per_token * sizes.SEQUENCE_128K / sizes.GIB == pytest.approx(row["gib_per_128k"], abs=5e-6)


@pytest.mark.parametrize("name", CAUSAL_TINY)
@pytest.mark.parametrize("seq_len", [10, 40])  # tiny-gemma3's local layers keep 15 tokens: 40 crosses it
def test_formula_equals_the_bytes_of_a_real_cache(name, seq_len):
    loaded = load_cached(name, "float32")
    ids = torch.arange(1000, 1000 + seq_len)[None]
    expected = sizes.model_cache_bytes(loaded.config, seq_len, torch.float32)
    assert sizes.real_cache_bytes(loaded, ids) == expected["held"]
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
    windows = layers.layer_windows(loaded.config)
    global_layers = sum(w is None for w in windows)
    attn_width = loaded.config.num_attention_heads * loaded.config.head_dim
    assert farther - far == 2 * 2 * attn_width * 100 * global_layers  # only global layers grow


def test_a_spread_is_settled_within_a_tenth_of_the_median():
    assert costs.settled([100, 101, 99, 100, 102]) and costs.settled([7.0])
    assert not costs.settled([100, 130, 90, 100, 140])  # quartiles 100 and 130: 30 % of the median


def test_decode_step_times_and_the_bandwidth_bound_are_measured():
    loaded = load_cached("tiny-llama", "float32")
    ids = torch.arange(1000, 1064)[None]
    calls = []
    hook = loaded.model.register_forward_hook(lambda module, args, kwargs_out: calls.append(1))
    try:
        times = costs.decode_step_times(loaded, ids, repeats=3)
    finally:
        hook.remove()
    # the prefill, then WARMUPS untimed rounds and 3 to 9 timed ones (more while the spread is wide),
    # each a cached and an uncached step
    n = len(times.cached_repeats_ms)
    assert 3 <= n <= costs.MORE_REPEATS * 3 and len(calls) == 1 + 2 * (costs.WARMUPS + n)
    assert n == 3 or not (costs.settled(times.cached_repeats_ms[:-1]) and costs.settled(times.uncached_repeats_ms[:-1]))
    assert times.context == 64 and times.cached_ms > 0 and times.uncached_ms > 0
    # every repeat is kept (a page shows the spread), the medians are theirs, a speed-up per repeat pair
    assert len(times.uncached_repeats_ms) == n
    assert times.cached_ms == statistics.median(times.cached_repeats_ms)
    assert times.uncached_ms == statistics.median(times.uncached_repeats_ms)
    assert times.speedups == [u / c for u, c in zip(times.uncached_repeats_ms, times.cached_repeats_ms)]
    assert times.cache_bytes == sizes.model_cache_bytes(loaded.config, 64)["held"]
    bandwidth = costs.memory_bandwidth(megabytes=64, repeats=2)
    assert 1e8 < bandwidth < 1e13  # bytes per second, anything from a slow VM to HBM
    bound = costs.bandwidth_bound_ms(loaded, 64, bandwidth)
    weights = sum(costs.matmul_weights(loaded)) * 4
    assert bound == pytest.approx(1e3 * (weights + sizes.model_cache_bytes(loaded.config, 64)["held"]) / bandwidth)


def test_times_are_printed_with_their_spread():
    from kvutils.report import timing as report_timing

    assert report_timing.spread_text([3.0, 1.0, 2.0]) == "median 2 ms, min–max 1–3 ms over 3 repeats"
    assert report_timing.spread_text([2.5], "s") == "2.5 s, one run (no spread)"
    assert report_timing.spread_text(None) == "repeats not recorded"
    step = {"context": 2000, "cached_ms": 10.0, "uncached_ms": 447.0, "speedup": 44.7, "speedups": [40.0, 44.7, 49.6],
            "cached_repeats_ms": [9.0, 10.0, 11.0], "uncached_repeats_ms": [440.0, 447.0, 450.0]}
    assert report_timing.speedup_text(step) == "44.7× (ratio of the medians; per repeat pair 40–49.6×, n = 3)"
    shorter = {**step, "context": 128, "speedups": [2.0, 3.0, 4.0], "analytical_ratio": 20.0, "bound_ms": 5.0}
    row = report_timing.timing_table({"m": {"steps": [{**step, "analytical_ratio": 900.0, "bound_ms": 4.0},
                                                       shorter]}}).loc["m, 2000 tokens (3 repeats)"]
    assert (row["cached step (ms)"], row["uncached step (ms)"], row["speed-up (×)"]) == ("10 [9–11]", "447 [440–450]",
                                                                                        "44.7 [40–49.6]")
    assert row["cached ÷ bandwidth bound"] == "2.5"
    assert row["speed-up against the shorter context"].startswith("cannot separate at this n")  # 3 and 3 repeats
    def placed(pairs, context=2000):
        return report_timing.against_published({"context": context, "speedups": pairs}, 29.49, 2000, "the article")

    assert "lies above every one of our 2 repeat pairs' speed-ups (10–20×)" in placed([10.0, 20.0])
    assert "lies below every one" in placed([30.0, 40.0]) and "within the range" in placed([20.0, 40.0])
    assert "lies above our one repeat's 10×" in placed([10.0])
    assert "not set against each other" in placed([30.0, 40.0], context=128)  # another context: not placed


def test_chapter4_speed_trend_needs_the_repeat_ranges_apart():
    """'The speed-up grew with context' was read from two medians; with repeats it needs an exact rank
    test to put the longer context's repeat pairs above the shorter's (5 a side can, 3 cannot)."""
    from kvutils.report import cache_approximations as report_costs
    from kvutils.report.timing import timing_table

    def grew(short: list[float], long: list[float]) -> str:
        steps = [{"context": c, "cached_ms": 1.0, "uncached_ms": statistics.median(v), "speedup": statistics.median(v),
                  "speedups": v, "cached_repeats_ms": [1.0] * len(v), "uncached_repeats_ms": v,
                  "analytical_ratio": 100.0, "bound_ms": 0.5} for c, v in ((128, short), (2000, long))]
        table = timing_table({"m": {"steps": steps}})
        assert table.loc[f"m, 128 tokens ({len(short)} repeats)", "speed-up against the shorter context"] == "—"
        return table.loc[f"m, 2000 tokens ({len(long)} repeats)", "speed-up against the shorter context"]

    assert grew([2.0, 2.5, 3.0, 2.2, 2.8], [40.0, 44.0, 48.0, 42.0, 46.0]) == "2000 tokens higher (p = 0.0079)"
    assert grew([2.0, 2.5, 3.0], [40.0, 44.0, 48.0]).startswith("cannot separate at this n")  # p ≥ 0.1 whatever the data
    assert grew([2.0, 2.5, 50.0, 2.2, 2.8], [40.0, 44.0, 48.0, 42.0, 46.0]).startswith("no detectable difference")
    assert grew([40.0, 44.0, 48.0, 42.0, 46.0], [2.0, 2.5, 3.0, 2.2, 2.8]) == "2000 tokens lower (p = 0.0079)"
    timing = {"where": "alone", "threads": 2, "cores": 2}
    steps = {"m": {"steps": [{"context": 128, "speedups": [1.0] * 5}]}}
    assert "median of 5 repeats" in report_costs.timing_clause({"decode": steps, "decode_timing": timing})


def test_chapter4_setup_names_the_weights():
    from kvutils.report import cache_approximations as report_costs

    run = {"documents": ["a"], "prefill": 8, "decode": 4, "exact_perplexity": 2.0, "ops": {}}
    glue = report_costs.chapter4_glue({"bandwidth_gb_s": 1.0, "decode": {}, "bytes": [],
                                       "table2": {"gemma3-270m": {"plain": run, "chunks": None}}})
    assert "gemma3-270m: Q4_K_M GGUF, dequantised to fp32" in glue["setup"]


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_table1_gives_a_windowed_models_128k_bytes_as_held(name):
    """Table 1's held figure per 128K tokens: every layer's 131,072 positions at 16 bits, but a
    sliding-window layer only the window − 1 entries it keeps (Gemma 3: 15 of 18 layers)."""
    from kvutils.studies.cache_approximations.table2 import bytes_rows

    config = load_cached(name, "float32").config
    row = bytes_rows({name: config}, 8)[-1]
    kv_heads, head_dim = layers.kv_shape(config)
    kinds = layers.layer_types(config)
    entries = sum(min(sizes.SEQUENCE_128K, config.sliding_window - 1) if k == "sliding_attention" else sizes.SEQUENCE_128K
                  for k in kinds)
    assert row["gib_per_128k_held"] == pytest.approx(2 * kv_heads * head_dim * 2 * entries / sizes.GIB, rel=1e-12)
    windowed = "sliding_attention" in kinds
    assert (row["gib_per_128k_held"] < row["gib_per_128k"]) == windowed
