"""Chapter 4's notebook run on the quick profile: its results hold the identities (exact = exact,
formula = real cache bytes, blend at 1.0 = exact) and Table 2 takes in the frontier's methods."""
import json

import pytest

from kvutils.book import chapters
from kvutils.report import cache_approximations as report_costs
from kvutils.studies.cache_approximations import study as approx_study

QUICK = chapters.QUICK["04_cache_approximations"]


def test_chapter4_quick_results_hold_the_identities(quick_chapters):
    root, _ = quick_chapters
    record = json.loads((root / "results" / "04_cache_approximations.json").read_text())
    numbers = record["numbers"]
    # run as make book's jobs: the steps were timed alone, on every thread, not in the lane
    assert numbers["decode_timing"]["where"] == "alone, as the build's first job, before the chapters ran side by side"
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
    assert "sliding-attention" in frontier["tiny-gemma3"]["refused"]["hf_quantized:backend=fp8"]
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
    # long-range retrieval: a tiny random model retrieves nothing, so each (model, haystack) stops at the
    # gate of its shortest context, with its exact records, and no method is judged
    retrieval = numbers["retrieval"]
    assert set(retrieval) == {"tiny-llama"}
    for model in retrieval.values():
        assert set(model) == {"pydoc", "filler", "kl_vs_retrieval"}
        for hay in ("pydoc", "filler"):
            r = model[hay]
            assert r["gate"] == {"128": False} and r["not_run"] == {"160": 128} and r["ops"] == {}
            assert len(r["exact"]["per_prompt"]) == 3 and r["verdicts"] == []
            assert {"depth", "context", "correct", "key_logprob"} <= set(r["exact"]["per_prompt"][0])
    for figure in ("04_decode_step", "04_bytes_per_token", "04_approximations", "04_blend_sweep", "04_frontier",
                   "04_retrieval", "04_needle", "04_kl_vs_retrieval"):
        assert (root / "results" / "figures" / f"{figure}.png").stat().st_size > 10_000
    # Table 2 gains the frontier's methods as rows, saying on how many documents; its own rows keep their numbers
    table = report_costs.approximations_table(numbers["table2"], frontier)
    snap = next(spec for spec in frontier["tiny-llama"]["ops"] if spec.startswith("snapkv:compression_ratio=0.5"))
    assert table.loc[snap, "scored on"] == f"{len(frontier['tiny-llama']['documents'])} documents (the frontier's)"
    assert table.loc[snap, "tiny-llama"].startswith(report_costs.fmt(frontier["tiny-llama"]["ops"][snap]["mean_kl"], 3))
    assert table.loc["hf_quantized:backend=fp8", "tiny-gemma3"].startswith("refused: ")
    assert table.loc["hf_quantized:backend=fp8", "scored on"].endswith("documents (the frontier's)")  # tiny-llama's
    plain, chunks = numbers["table2"]["tiny-llama"]["plain"], numbers["table2"]["tiny-llama"]["chunks"]
    setting = f"{len(plain['documents'])} documents, {plain['prefill']} + {plain['decode']} tokens"
    assert table.loc["exact", "scored on"] == setting
    reference = table.loc[report_costs.CHUNK_REFERENCE, "tiny-llama"]  # the chunk rows sit under their own exact row
    assert reference.endswith(report_costs.fmt(chunks["exact_perplexity"], 4))
    alone = report_costs.approximations_table(numbers["table2"])
    assert table.loc["quantize_naive:bits=4", alone.columns].equals(alone.loc["quantize_naive:bits=4"])


def _accept_runs(numbers: dict):
    """(where, run) for every acceptance run of chapter 4's results: Table 2's two settings, the frontier."""
    for model, runs in numbers["table2"].items():
        for kind in ("plain", "chunks"):
            if runs.get(kind):
                yield f"table2.{model}.{kind}", runs[kind]
    for model, run in numbers["frontier"].items():
        yield f"frontier.{model}", run


def test_every_row_is_read_against_the_exact_reference_it_was_computed_with(quick_chapters):
    """Each results file's exact reference is its rows' own: every operation of an acceptance run was
    scored on the run's documents, in order, and the run's exact row (where it has one) is that
    reference itself, per document; in retrieval, each method's records are the exact cache's
    prompts it names, one for one (the same depth and context)."""
    root, _ = quick_chapters
    numbers = json.loads((root / "results" / "04_cache_approximations.json").read_text())["numbers"]
    runs = dict(_accept_runs(numbers))
    assert {"table2.tiny-llama.plain", "table2.tiny-llama.chunks", "frontier.tiny-llama"} <= set(runs)
    for where, run in runs.items():
        for spec, op in run["ops"].items():
            assert [d["id"] for d in op["per_document"]] == run["documents"], (where, spec)
        if "exact" in run["ops"]:
            own = [d["perplexity"] for d in run["ops"]["exact"]["per_document"]]
            assert own == pytest.approx(run["exact_perplexity_per_document"], rel=1e-12), where
    for model, hays in numbers["retrieval"].items():
        for hay, result in hays.items():
            if hay == "kl_vs_retrieval" or not result.get("ops"):
                continue
            exact = [(r["depth"], r["context"]) for r in result["exact"]["per_prompt"]]
            for label, entry in result["ops"].items():
                for regime in ("aware", "agnostic"):
                    mine = [(r["depth"], r["context"]) for r in entry[regime]["per_prompt"]]
                    assert mine == [exact[i] for i in entry[regime]["prompts"]], (model, hay, label, regime)
