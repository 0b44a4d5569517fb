"""Chapter 4's plan: bad parameters fail before any model loads (the notebook's first cell calls it);
decode timings are reused only where they match; the findings follow the numbers
(tests/book/test_chapter4_notebook.py runs the notebook)."""
import json
import re
import warnings

import nbformat
import pytest
from conftest import load_cached

from kvutils.book import chapters
from kvutils.report import cache_approximations as report_costs
from kvutils.studies.cache_approximations import retrieval
from kvutils.studies.cache_approximations import study as approx_study
from kvutils.studies.parameters import Chapter4Parameters

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
        approx_study.plan(Chapter4Parameters(**{**GOOD, **change}))


def test_a_window_that_evicts_nothing_warns_but_runs(no_model_loads):
    with pytest.warns(UserWarning, match="evicts nothing"):
        approx_study.plan(Chapter4Parameters(**{**GOOD, "ops": "window:size=200,sinks=4"}))


def test_default_ops_cover_the_article_and_the_additions(no_model_loads):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = approx_study.plan(Chapter4Parameters(**{**GOOD, "ops": "default", "prefill": 256, "decode": 200, "chunk_decode": 64,
                                 "models": "tiny-llama", "table2_models": "tiny-llama", "n_docs": 1,
                                 "frontier_models": "tiny-llama"}))
    names = {op.name for op in p.ops + p.chunk_ops}
    assert names == {"exact", "cast", "quantize_naive", "quantize_kivi", "window", "chunk_reuse", "chunk_blend"}


def test_the_timing_unit_is_reused_only_for_its_own_inputs(tmp_path, no_model_loads, monkeypatch):
    """The timing's unit stands while its record's hash is its inputs' hash and its file holds what
    it wrote; other settings, or the file edited, compute it again (kvutils.studies.units)."""
    from kvutils.core import jobrecords
    from kvutils.studies import units

    checked = Chapter4Parameters(**GOOD)
    expected = units.inputs_hash(units.TIMING, checked, tmp_path)
    path = tmp_path / approx_study.DECODE_TIMING_FILE
    path.write_text("{}")
    jobrecords.write_record(tmp_path, "timing", {"inputs_hash": expected, "commit": "c" * 12, "finished": "now",
                                                 "wall_s": 1.0, "outputs": {path.name: jobrecords.file_digest(path)}})
    assert units.run_unit(units.TIMING, checked, tmp_path)["inputs_hash"] == expected  # reused: no model loads
    other = Chapter4Parameters(**{**GOOD, "timing_repeats": 7})
    assert units.inputs_hash(units.TIMING, other, tmp_path) != expected
    same_for_timing = Chapter4Parameters(**{**GOOD, "n_docs": 3})  # Table 2's size: not the timing's input
    assert units.inputs_hash(units.TIMING, same_for_timing, tmp_path) == expected
    path.write_text('{"edited": 1}')
    with pytest.raises(pytest.fail.Exception, match="a model loaded"):
        units.run_unit(units.TIMING, checked, tmp_path)


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "seconds"}
    return [_untimed(v) for v in value] if isinstance(value, list) else value


def test_retrieval_by_model_then_related_is_what_the_chapter_scores_by_itself(tmp_path, monkeypatch):
    """make book scores the retrieval test one job per model (`units.retrieval_unit`), checkpointed
    per haystack; chapter 4's results relate the parts. What they hold is what one run over both
    models scores (a tiny model, two prompts per haystack)."""
    from kvutils.core import checkpoints
    from kvutils.studies import units
    from kvutils.studies.cache_approximations import retrieval_unit as ch4

    small = {**GOOD, "models": "tiny-llama,tiny-gemma3", "retrieval_models": "tiny-llama,tiny-gemma3",
             "retrieval_contexts": "128", "retrieval_prompts": 2, "filler_prompts": 2}
    checked = Chapter4Parameters(**small)
    assert units.retrieval_models(checked) == ["tiny-llama", "tiny-gemma3"]
    monkeypatch.setenv(checkpoints.ENV, str(tmp_path / "units"))
    for model in ("tiny-llama", "tiny-gemma3"):
        unit = units.retrieval_unit(model)
        ch4.compute(checked, tmp_path, unit)
        assert (tmp_path / unit.outputs[0]).is_file()
    assert sorted(u.name.split("-")[1] for u in (tmp_path / "units").iterdir()) == ["tiny"] * 4  # one per haystack
    monkeypatch.delenv(checkpoints.ENV)
    p = approx_study.plan(checked)
    by_itself = {m: retrieval.score_model(load_cached(m, "float32"), p.retrieval_prompts[m], progress=False)
                 for m in p.retrieval_models}
    parts = [json.loads((tmp_path / units.retrieval_unit(m).outputs[0]).read_text()) for m in p.retrieval_models]
    merged = {m: v for part in parts for m, v in part["retrieval"].items()}
    assert _untimed(merged) == _untimed(json.loads(json.dumps(by_itself)))  # the clocks aside


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


def test_chapter4_evidence_tables_follow_the_numbers():
    """Chapter 4's Evidence tables are computed: the paired tests of sinks and of a partial recompute
    say who is lower, or that the test does not separate them; Table 1 says where a cache holds less
    than the formula; the timing text names where and how the steps were timed."""
    from kvutils.report.cache_bytes import bytes_table

    def verdicts(**changes) -> list[str]:
        return list(report_costs.paired_table(_numbers({"a": (2.0, 5.0)}, **changes))["verdict"])

    assert verdicts() == ["with sinks lower", "recompute 15% lower"]
    assert verdicts(sink_kl=0.5, blend_kl=0.4) == ["with sinks higher", "recompute 15% higher"]
    assert verdicts(sink_kl=0.301, blend_kl=0.299, phase=2) == ["no detectable difference"] * 2  # within the noise
    table = report_costs.paired_table(_numbers({"a": (2.0, 5.0)}))
    assert list(table.index) == ["m: window of 8, with sinks against without",
                                 "m: recompute 15 % of a reused chunk against none"]
    assert set(table["n"]) == {"8 documents"}
    rows = [{**_numbers({})["bytes"][0], "model": f"m{held:g}", "attention": "full", "layers": 1, "kib_per_token": 1.0,
             "gib_per_128k": 1.0, "measured_kib_per_token": held, "held_kib_per_token_fp32": held} for held in (50.0, 100.0)]
    check = list(bytes_table(rows).iloc[:, -1])
    assert check[0].endswith("(50 % of the formula: its sliding-window layers keep their window)")
    assert "% of the formula" not in check[1]
    assert "2 torch thread(s) of 2 cores" in report_costs.timing_clause(_numbers({"a": (2.0, 5.0)}))


def _scored(spec: str, family: str, top1: float, wobble: float = 0.05) -> dict:
    """A Table 2 row scored on 16 documents whose top-1 agreement sits around `top1`."""
    docs = [min(100.0, top1 + wobble * ((i * 7) % 5 - 2)) for i in range(16)]
    return {"op": spec, "family": family, "mean_kl": 0.01, "perplexity": 10.0, "cache_bytes": 1024.0,
            "top1_agreement_pct": sum(docs) / 16,
            "per_document": [{"id": f"d{i}", "top1_agreement_pct": t} for i, t in enumerate(docs)]}


def test_table2_says_near_exact_only_where_the_guides_test_does():
    """Chapter 4's Table 2 finding and its column read the conclusions' guide's test (top-1 per
    document against the near-exact line): KIVI 4-bit at 96.5 % is costly there, never "nearly
    free"; an operation the test cannot place is "not separated"; a window that stays near-exact
    changes the claim."""
    from kvutils.cache.accept_report import threshold_test
    from kvutils.report.chapter4_findings import table2_finding

    def numbers(window_top1: float = 80.5) -> dict:
        rows = [_scored("exact", "exact", 100.0, 0.0), _scored("cast:dtype=float16", "precision (cast)", 99.95),
                _scored("quantize_naive:bits=8", "quantisation", 99.0, 0.5),
                _scored("quantize_kivi:bits=4,group=32,residual=128", "quantisation", 96.5),
                _scored("window:size=128,sinks=4,reindex=false", "window (position-based eviction)", window_top1)]
        return {"table2": {"m": {"plain": {"ops": {r["op"]: r for r in rows}, "documents": ["d"] * 16},
                                 "chunks": None}}}

    finding = table2_finding(numbers())
    assert finding.claim == "Only storing fewer bits stays near-exact; every window costs top-1."
    assert finding.value("near") == "float16 cache" and (finding.value("costly"), finding.value("n")) == (2, 4)
    assert finding.value("tops") == "KIVI 4-bit at 96.5 %, window 128 + 4 sinks at 80.5 %" and finding.test.n == 16
    table = report_costs.approximations_table(numbers()["table2"])
    marks = {spec: cell.split(" · ")[1].partition(" ")[2] for spec, cell in zip(table.index, table["m"])}
    assert marks == {"exact": "", "cast:dtype=float16": "✓", "quantize_naive:bits=8": "?",
                     "quantize_kivi:bits=4,group=32,residual=128": "✗", "window:size=128,sinks=4,reindex=false": "✗"}
    assert table.index.name == "operation (KL nats · top-1 %, ✓ ✗ ? against 99 % · perplexity)"
    guide = {"a>b": "✓", "a<b": "✗"}
    for spec, row in numbers()["table2"]["m"]["plain"]["ops"].items():
        if spec != "exact":  # the same test as the guide's, row by row
            top1 = [d["top1_agreement_pct"] for d in row["per_document"]]
            assert marks[spec] == guide.get(threshold_test(spec, top1, 99.0).verdict, "?")
    assert table2_finding(numbers(window_top1=99.95)).claim == "Half the approximations stay near-exact."
    assert table2_finding(numbers(window_top1=99.95)).value("near") == "float16 cache, window of 128 (4 sinks)"


def test_the_retrieval_finding_counts_losses_apart_from_tests_that_do_not_separate():
    """A loss is a loss (McNemar, beyond the margin, or the needle gone by construction); a test that
    does not separate is neither kept nor lost, and the claim says "most lose" only from the losses."""
    from kvutils.report.chapter4_findings import answer_finding, retrieval_finding
    from kvutils.report.chapter4_verdicts import RetrievalVerdict

    def verdict(mark: str) -> RetrievalVerdict:
        return RetrievalVerdict(36, 30, 36, 0.01, -0.2, (-0.3, -0.1), mark, "", 0)

    def finding(marks: list[str]):
        return retrieval_finding([(f"m{i}@0.25", verdict(m)) for i, m in enumerate(marks)]
                                 + [("cast:dtype=bfloat16", verdict("✓"))])

    mixed = finding(["✗"] * 3 + ["✗ ="] + ["?"] * 4 + ["✓", "≈"])
    assert [mixed.value(k) for k in ("evict_n", "evict_lost", "evict_kept", "prec_lost", "prec_kept", "prec_n")] == \
        [10, 4, 2, 0, 1, 1]
    assert mixed.claim == "Eviction loses keys far back in some tests, not in others."
    assert finding(["✗"] * 6 + ["?"] * 4).claim == "Most eviction methods lose keys far back."
    assert finding(["✗", "✗ ="]).claim == "Every eviction method loses keys far back."
    assert finding(["✓"] * 6 + ["?"] * 4).claim == "Eviction mostly keeps the keys far back."
    numbers = _numbers({"a": (2.0, 5.0)})
    assert answer_finding(numbers, [mixed]).claim == "Speed for bytes; what eviction loses far back is not yet separated."
    assert answer_finding(numbers, [finding(["✗"] * 6 + ["?"] * 4)]).value("lost") == 6


def test_the_page_opens_with_its_findings_and_glues_nothing():
    """notebook 04 opens with the findings box (filled from `chapter4_findings` after the run), its
    sections show the findings as displayed outputs, and no markdown cell holds a {glue} role."""
    from kvutils.core.paths import REPO_ROOT

    notebook = nbformat.read(REPO_ROOT / "notebooks" / "04_cache_approximations.ipynb", as_version=4)
    assert notebook.cells[0].source.startswith("# 4.") and "pending()" in notebook.cells[1].source
    assert not any("{glue" in c.source for c in notebook.cells if c.cell_type == "markdown")
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    assert "chapter4_findings(numbers)" in code and "findings_box.update(page.show_box())" in code
    shown = {m for m in re.findall(r'page\.show\("(\w+)"', code)}
    assert shown == {"decode", "bytes", "table2", "frontier", "retrieval", "followups", "tau"}
