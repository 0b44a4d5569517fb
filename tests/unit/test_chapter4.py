"""Chapter 4: bad parameters fail in the first cell before any model loads; the quick profile's
results hold the identities (exact = exact, formula = real cache bytes, blend at 1.0 = exact)."""
import json
import warnings

import pytest

from kvutils.book import chapters
from kvutils.report import costs as report_costs
from kvutils.studies.cache_approximations import study as approx_study

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
    (dict(skip_short=False, prefill=400, decode=100, n_docs=16),
     r"corpus: documents shorter than prefill \+ decode \+ 1 = 501 tokens: pydoc:"),
    (dict(skip_short="yes"), r"skip_short must be True or False"),
    (dict(frontier_models="tiny-qwen3"), r"frontier_models: \['tiny-qwen3'\] not in models"),
    (dict(frontier_ops="snapkv:compression_ratio=1.5"), r"frontier_ops: snapkv: compression_ratio=1.5 is not allowed"),
    (dict(frontier_ops="chunk_reuse:chunk=32"), r"frontier_ops: .*chunk operation"),
    (dict(frontier_docs=0), r"frontier_docs must be >= 1"),
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
    # run in lanes (as make book runs them): the steps were timed alone, on every thread, not in the lane
    assert numbers["decode_timing"]["where"] == "alone, before the chapters ran in lanes"
    assert numbers["decode_timing"]["threads"] >= 1 and record["machine"]["torch_threads"] == 1
    assert json.loads((root / "results" / approx_study.DECODE_TIMING_FILE).read_text())["decode"] == numbers["decode"]
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
    assert (llama["hf_quantized:backend=fp8"]["path"] == "step"
            and llama["h2o:compression_ratio=0.25,recent=0.5"]["path"] == "step")
    # the frontier's own keys: per-document KL, paired verdicts per level, mean held bytes over the decode
    n = len(frontier["tiny-llama"]["documents"])
    assert n == QUICK["frontier_docs"] and all(len(r["per_doc_kl"]) == n for r in llama.values())
    assert frontier["tiny-llama"]["verdicts"] and all(v["n"] == n for v in frontier["tiny-llama"]["verdicts"])
    assert llama["h2o:compression_ratio=0.25,recent=0.5"]["level"] == 0.5  # 48 held = a press at 0.5's mean
    assert llama["exact"]["mean_held_bytes"] > llama["exact"]["cache_bytes"]  # it grows over the decode
    gemma_ties = {(t["a"].split(":")[0], t["b"] and t["b"].split(":")[0]) for t in frontier["tiny-gemma3"]["construction_ties"]}
    assert (("adakv", "snapkv") in gemma_ties) == (frontier["tiny-gemma3"]["kv_heads"] == 1)
    assert llama["random:compression_ratio=0.5,seed=0"]["cache_bytes"] == frontier["tiny-llama"]["exact_cache_bytes"] / 2
    for figure in ("04_decode_step", "04_bytes_per_token", "04_approximations", "04_blend_sweep", "04_frontier"):
        assert (root / "results" / "figures" / f"{figure}.png").stat().st_size > 10_000
    # Table 2 gains the frontier's methods as rows, saying on how many documents; its own rows keep their numbers
    table = report_costs.approximations_table(numbers["table2"], frontier)
    snap = next(spec for spec in frontier["tiny-llama"]["ops"] if spec.startswith("snapkv:compression_ratio=0.5"))
    assert table.loc[snap, "scored on"] == f"{len(frontier['tiny-llama']['documents'])} documents (the frontier's)"
    assert table.loc[snap, "tiny-llama"].startswith(report_costs.fmt(frontier["tiny-llama"]["ops"][snap]["mean_kl"], 3))
    assert table.loc["hf_quantized:backend=fp8", "tiny-gemma3"].startswith("refused: ")
    assert table.loc["hf_quantized:backend=fp8", "scored on"].endswith("documents (the frontier's)")  # tiny-llama's
    assert table.loc["exact", "scored on"] == f"{len(numbers['table2']['tiny-llama']['plain']['documents'])} documents"
    alone = report_costs.approximations_table(numbers["table2"])
    assert table.loc["quantize_naive:bits=4", alone.columns].equals(alone.loc["quantize_naive:bits=4"])


def test_timings_are_read_only_where_the_lanes_runner_points_and_only_if_they_match(tmp_path, monkeypatch,
                                                                                    no_model_loads):
    """Standalone, the chapter times itself; under the lanes it reads the file `time_alone` wrote,
    and a file timed for other settings is an error, not silently reused."""
    p = approx_study.plan(**GOOD)
    monkeypatch.delenv(approx_study.TIMINGS_ENV, raising=False)
    assert approx_study.deferred_timings(p) is None
    path = tmp_path / approx_study.DECODE_TIMING_FILE
    timed = {"where": "alone", "threads": 2, "cores": 2, "bandwidth_gb_s": 1.0, "decode": {}, "cache_bytes": {},
             "key": json.loads(json.dumps(approx_study._timing_key(p)))}
    path.write_text(json.dumps(timed))
    monkeypatch.setenv(approx_study.TIMINGS_ENV, str(path))
    assert approx_study.deferred_timings(p)["where"] == "alone"
    other = approx_study.plan(**{**GOOD, "timing_repeats": 7})
    with pytest.raises(ValueError, match="timed for other settings"):
        approx_study.deferred_timings(other)


def _docs(mean: float, n: int = 8, wobble: float = 0.01, phase: int = 0) -> dict:
    """An operation scored on n documents around `mean` (accept's per_document entries); another
    `phase` moves the documents' order, so its differences to phase 0 change sign."""
    kls = [mean + wobble * ((i * 7 + phase) % 5 - 2) for i in range(n)]
    return {"mean_kl": sum(kls) / n, "per_document": [{"id": f"d{i}", "mean_kl": k} for i, k in enumerate(kls)]}


def _numbers(speedups: dict, held: float = 50.0, sink_kl: float = 0.1, blend_kl: float = 0.2, phase: int = 0) -> dict:
    steps = {m: {"steps": [{"context": c, "cached_ms": 1.0, "uncached_ms": s, "speedup": s, "analytical_ratio": 10.0,
                            "bound_ms": 0.5} for c, s in zip((128, 2000), pair)]} for m, pair in speedups.items()}
    ops = {"window:size=8,sinks=4,reindex=false": {"name": "window", **_docs(sink_kl, phase=phase), "top1_agreement_pct": 80.0},
           "window:size=8,sinks=0,reindex=false": {"name": "window", **_docs(0.3), "top1_agreement_pct": 60.0}}
    chunks = {"chunk_reuse:positions=reindexed,chunk=32": {"name": "chunk_reuse", **_docs(0.3), "top1_agreement_pct": 70.0},
              "chunk_blend:recompute_fraction=0.15,chunk=32": {"name": "chunk_blend", **_docs(blend_kl, phase=phase),
                                                               "top1_agreement_pct": 75.0}}
    return {"decode": steps, "decode_timing": {"where": "alone", "threads": 2, "cores": 2},
            "bytes": [{"source": "ours", "model": "m", "held_kib_per_token_fp32": held,
                       "formula_kib_per_token_fp32": 100.0, "check_tokens": 2000}],
            "table2": {"m": {"plain": {"ops": ops}, "chunks": {"ops": chunks}}}}


def test_chapter4_findings_follow_the_numbers():
    """Each measured sentence of chapter 4 is computed, and says the opposite when the numbers do."""
    f = report_costs.chapter4_findings(_numbers({"a": (2.0, 5.0), "b": (3.0, 4.0)}))
    assert f["speed_vs_analytical"].startswith("The measured speed-up is smaller than the analytical compute ratio everywhere")
    assert "2× to 2×" in f["speed_vs_analytical"]  # cached ÷ bandwidth bound
    assert f["speed_grows"].startswith("In this run the speed-up grew with context on every model")
    assert "holds 50% of the formula's bytes" in f["bytes_windowed"]
    assert "size=8: with sinks beats without in mean KL (nats) (n = 8 documents" in f["sinks"]
    assert "recomputing 15% of the chunk against none (positions corrected): recompute 15% beats none" in f["blend"]
    assert "2 torch thread(s) of 2 cores" in f["timing"]
    f = report_costs.chapter4_findings(_numbers({"a": (12.0, 5.0)}, held=100.0, sink_kl=0.5, blend_kl=0.4))
    assert "it reaches it for a at 128 tokens" in f["speed_vs_analytical"]
    assert f["speed_grows"].startswith("In this run the speed-up did not grow with context on any model: a (12× → 5×")
    assert f["bytes_windowed"].startswith("No model of this run holds fewer bytes than the formula")
    assert "without beats with sinks" in f["sinks"]
    assert "none beats recompute 15%" in f["blend"]
    f = report_costs.chapter4_findings(_numbers({"a": (2.0, 5.0)}, sink_kl=0.301, blend_kl=0.299, phase=2))  # within the noise
    assert "no detectable difference in mean KL (nats) between with sinks and without at n = 8" in f["sinks"]
    assert "no detectable difference in mean KL (nats) between recompute 15% and none at n = 8" in f["blend"]
