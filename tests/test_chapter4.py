"""Chapter 4: bad parameters fail in the first cell before any model loads; the quick profile's
results hold the identities (exact = exact, formula = real cache bytes, blend at 1.0 = exact)."""
import json
import warnings

import pytest

from kvutils import approx_study, chapters

QUICK = chapters.QUICK["04_cache_approximations"]
GOOD = dict(QUICK, corpus="pydoc", device="cpu")


@pytest.mark.parametrize("change, message", [
    (dict(ops="quantize_naive:bits=3"), r"ops: quantize_naive: bits=3 is not allowed"),
    (dict(ops="window:size=8,sinks=8"), r"ops: window: sinks=8 is not allowed"),
    (dict(ops="prune:ratio=0.5"), r"ops: .*unknown operation 'prune'; registered: exact, cast, quantize_naive"),
    (dict(ops="chunk_blend:recompute_fraction=1.5,chunk=32"), r"recompute_fraction=1.5 is not allowed"),
    (dict(prefill=20000, decode=1), r"documents shorter than prefill \+ decode \+ 1|handles at most"),
    (dict(table2_models="tiny-qwen3"), r"table2_models: \['tiny-qwen3'\] not in models"),
    (dict(contexts="128,lots"), r"contexts must be integers separated by commas"),
    (dict(models="minilm-l6"), r"models: minilm-l6 is a bidirectional encoder"),
    (dict(n_docs=0), r"n_docs must be >= 1"),
    (dict(skip_short=False, prefill=400, decode=100, n_docs=16), r"corpus: documents shorter than prefill \+ decode \+ 1 = 501 tokens: pydoc:"),
    (dict(skip_short="yes"), r"skip_short must be True or False"),
    (dict(frontier_models="tiny-qwen3"), r"frontier_models: \['tiny-qwen3'\] not in models"),
    (dict(frontier_ops="snapkv:compression_ratio=1.5"), r"frontier_ops: snapkv: compression_ratio=1.5 is not allowed"),
    (dict(frontier_ops="chunk_reuse:chunk=32"), r"frontier_ops: .*chunk operation"),
    (dict(frontier_docs=3), r"frontier_docs: 3 must be at most n_docs=2"),
])
def test_bad_parameters_fail_before_any_model_loads(change, message, no_model_loads):
    with pytest.raises(ValueError, match=message):
        approx_study.plan(**{**GOOD, **change})


def test_a_window_that_evicts_nothing_warns_but_runs(no_model_loads):
    with pytest.warns(UserWarning, match="evicts nothing"):
        approx_study.plan(**{**GOOD, "ops": "window:size=200,sinks=4"})


def test_default_ops_cover_the_article_and_the_additions(no_model_loads):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = approx_study.plan(**{**GOOD, "ops": "default", "prefill": 256, "decode": 200, "chunk_decode": 64,
                                 "models": "tiny-llama", "table2_models": "tiny-llama", "n_docs": 1,
                                 "frontier_models": "tiny-llama"})
    names = {op.name for op in p.ops + p.chunk_ops}
    assert names == {"exact", "cast", "quantize_naive", "quantize_kivi", "window", "chunk_reuse", "chunk_blend"}


def test_chapter4_quick_results_hold_the_identities(quick_chapters):
    root, _ = quick_chapters
    record = json.loads((root / "results" / "04_cache_approximations.json").read_text())
    numbers = record["numbers"]
    for model in ("tiny-llama", "tiny-gemma3"):
        steps = numbers["decode"][model]["steps"]
        assert [s["context"] for s in steps] == [32, 128]
        assert all(s["cached_ms"] > 0 and s["uncached_ms"] > 0 and s["analytical_ratio"] > 1 for s in steps)
        plain, chunks = numbers["table2"][model]["plain"]["ops"], numbers["table2"][model]["chunks"]["ops"]
        assert plain["exact"]["mean_kl"] == 0 and plain["exact"]["top1_agreement_pct"] == 100
        assert plain["exact"]["perplexity"] == pytest.approx(numbers["table2"][model]["plain"]["exact_perplexity"])
        blend_all = chunks["chunk_blend:recompute_fraction=1.0,chunk=32"]
        assert blend_all["mean_kl"] < 1e-9 and blend_all["top1_agreement_pct"] == 100
        assert plain["quantize_naive:bits=4"]["cache_bytes"] < plain["exact"]["cache_bytes"]
    ours = [r for r in numbers["bytes"] if r["source"] == "ours"]
    assert all(r["measured_kib_per_token"] == r["held_kib_per_token_fp32"] for r in ours)
    gemma = next(r for r in ours if r["model"].startswith("tiny-gemma3"))
    assert gemma["held_kib_per_token_fp32"] < gemma["formula_kib_per_token_fp32"]  # windowed layers
    frontier = numbers["frontier"]
    assert set(frontier) == {"tiny-llama", "tiny-gemma3"}
    assert "sliding_attention" in frontier["tiny-gemma3"]["refused"]["hf_quantized:backend=fp8"]
    llama = frontier["tiny-llama"]["ops"]
    assert llama["hf_quantized:backend=fp8"]["path"] == "step" and llama["h2o:compression_ratio=0.5,recent=0.5"]["path"] == "step"
    assert llama["random:compression_ratio=0.5,seed=0"]["cache_bytes"] == frontier["tiny-llama"]["exact_cache_bytes"] / 2
    for figure in ("04_decode_step", "04_bytes_per_token", "04_approximations", "04_blend_sweep", "04_frontier"):
        assert (root / "results" / "figures" / f"{figure}.png").stat().st_size > 10_000


def _run(ops: dict) -> dict:
    return {"exact_cache_bytes": 100.0, "documents": ["d"], "prefill": 8, "decode": 8, "refused": {},
            "ops": {spec: {"name": spec.split(":")[0], "family": family, "mean_kl": kl, "top1_agreement_pct": 90.0,
                           "perplexity": 2.0, "cache_bytes": 50.0} for spec, (family, kl) in ops.items()}}


def test_frontier_prose_follows_the_numbers():
    """The glued headline names the best eviction method per budget and the attention-informed
    methods that do not beat random; it changes when the numbers do."""
    from kvutils import report_costs

    ops = {"exact": ("exact", 0.0), "random:compression_ratio=0.5": ("press", 0.3),
           "snapkv:compression_ratio=0.5": ("press", 0.1), "tova:compression_ratio=0.5": ("decode-time eviction", 0.2),
           "quantize_kivi:bits=2": ("quantisation", 0.01)}
    text = report_costs.frontier_glue({"m": _run(ops)})
    assert "at compression 0.5 **snapkv**" in text and "every attention-informed method beats random" in text
    ops["tova:compression_ratio=0.5"] = ("decode-time eviction", 0.05)
    ops["snapkv:compression_ratio=0.5"] = ("press", 0.4)
    text = report_costs.frontier_glue({"m": _run(ops)})
    assert "at compression 0.5 **tova**" in text and "not better than random: snapkv" in text
    assert report_costs.frontier_glue({}) == "not run"
