"""The conclusions and the appendices on the quick run's results: verdicts follow the numbers, a
missing chapter is named, tables and figures read at the page's width, findings are glued in bold."""
import copy
import json

import pytest
from conftest import bench_record

from kvutils.core.catalog import NOTEBOOKS
from kvutils.report import appendix as ra
from kvutils.report import conclusions as rc


@pytest.fixture(scope="module")
def runs(quick_chapters):
    root, _ = quick_chapters
    return rc.load_chapters(root / "results")


def test_a_missing_chapter_is_named_with_the_command_that_makes_it(tmp_path, quick_chapters):
    root, _ = quick_chapters
    for name in NOTEBOOKS.values():
        if name != "03_sense_probes":
            (tmp_path / f"{name}.json").write_text((root / "results" / f"{name}.json").read_text())
    with pytest.raises(FileNotFoundError, match=r"chapter 03 \(03_sense_probes.json\).*make chapter N=03"):
        rc.load_chapters(tmp_path)


def test_decision_guide_verdicts_follow_the_measurements(runs):
    rows = rc.decision_rows(runs)
    by_op = {r["operation"]: r for r in rows}
    assert by_op["exact cache vs recomputation (ch. 1)"]["verdict"] is rc.EXACT  # the quick run's fp64 is exact
    prefix = by_op["prefix reuse across continuations (ch. 1)"]
    assert prefix["verdict"] is rc.EXACT and prefix["top1"] is None  # keys and values compared: no token decoded
    ch1 = rc.chapter_numbers(runs, "01")
    for dtype in {d for r in ch1.values() for d in r}:
        p = [r[dtype]["prefixes"] for r in ch1.values() if dtype in r]
        same, n = sum(x["bit_identical"] for x in p), sum(x["n_prefixes"] for x in p)
        assert f"{dtype}: {int(same)} of {int(n)} bit-identical" in prefix["test"]
    assert [r for r in rows if r["operation"].startswith("LoRA switch, tail patch")][0]["verdict"] is rc.EXACT
    ops = [r for r in rows if ":" in r["operation"] or r["operation"] == "exact"]
    assert ops and "exact" not in by_op  # the reference itself is not an operation
    for r in ops:  # a colour only where the test decides: the quick run's 2 documents never can
        assert r["verdict"] is (rc.EXACT if r["kl"] == 0 else rc.OPEN), r["operation"]
        assert r["n"] == "2 documents" and (r["kl"] == 0 or "no verdict possible at n = 2" in r["test"])
    assert by_op["quantize_naive:bits=4"]["bytes_pct"] < 50  # 4 bits + scales against 32-bit floats
    assert by_op["cast:dtype=bfloat16"]["bytes_bf16_pct"] == pytest.approx(100)  # a bf16 cast saves nothing over bf16


def test_a_guide_colour_needs_its_test(runs):
    """Near-exact and costly only where the per-document test separates the operation from the
    threshold; the stale cache costly only where chapter 5's paired test puts it below the tail patch."""
    model = next(iter(runs["04_cache_approximations"]["numbers"]["table2"]))
    changed = copy.deepcopy(runs)
    ops = changed["04_cache_approximations"]["numbers"]["table2"][model]["plain"]["ops"]
    base = ops["cast:dtype=bfloat16"]
    for name, top1 in (("high", [99.6, 99.8, 100, 99.9, 99.7, 100, 99.5, 100]), ("low", [90.0 + i for i in range(8)]),
                       ("mixed", [98.0, 100, 98.5, 99.9, 97.0, 100, 99.8, 98.0])):
        ops[f"cast:dtype={name}"] = {**base, "mean_kl": 0.01, "top1_agreement_pct": sum(top1) / 8,
                                     "per_document": [{"top1_agreement_pct": t} for t in top1]}
    by_op = {r["operation"]: r for r in rc.decision_rows(changed)}
    assert by_op["cast:dtype=high"]["verdict"] is rc.NEAR and by_op["cast:dtype=high"]["top1_ci"][0] > 99
    assert by_op["cast:dtype=low"]["verdict"] is rc.COSTLY and by_op["cast:dtype=low"]["top1_ci"][1] < 99
    assert by_op["cast:dtype=mixed"]["verdict"] is rc.OPEN
    r5 = next(iter(changed["05_qwen3_switch"]["numbers"].values()))
    held = r5["switch"]["heldout"][f"tail{max(r5['k_values'])}"]
    stale = next(r for op, r in by_op.items() if op.startswith("LoRA switch, stale"))
    assert stale["verdict"] is rc.OPEN  # 8 held-out examples: not separated from the tail patch
    n = 40  # examples from 8 documents: the test runs over the documents (chapter 5 clusters by document)
    held["tail_patch"]["right_per_example"], held["stale"]["right_per_example"] = [True] * n, [False] * n
    r5["switch"]["heldout_examples"]["group"] = [f"doc{i % 8}" for i in range(n)]
    stale = next(r for r in rc.decision_rows(changed) if r["operation"].startswith("LoRA switch, stale"))
    assert stale["verdict"] is rc.COSTLY and "n = 8" in stale["test"] and "8 documents (test)" in stale["n"]
    r5["switch"]["heldout_examples"]["group"] = ["doc0", "doc1"] * (n // 2)  # 2 documents: no verdict
    stale = next(r for r in rc.decision_rows(changed) if r["operation"].startswith("LoRA switch, stale"))
    assert stale["verdict"] is rc.OPEN


def test_a_lower_threshold_only_promotes_operations(runs):
    strict = {r["operation"]: r["verdict"] for r in rc.decision_rows(runs, 99.0)}
    lenient = {r["operation"]: r["verdict"] for r in rc.decision_rows(runs, 1.0)}
    assert all(lenient[op] is not rc.COSTLY for op in lenient if op != "exact")
    assert all(lenient[op] is strict[op] for op in strict if strict[op] is not rc.COSTLY)
    with pytest.raises(ValueError, match="near_exact_pct"):
        rc.decision_rows(runs, 0)


def test_verdicts_change_when_the_numbers_do(runs):
    """The RQ1 verdict is computed: an fp64 run that missed the tolerance turns it."""
    broken = copy.deepcopy(runs)
    for by_dtype in broken["01_cache_exactness"]["numbers"].values():
        if "float64" in by_dtype:
            by_dtype["float64"]["decode"]["max_logit_diff"] = 1e-3
    assert rc.conclusions_glue(runs)["rq1_verdict"].startswith("Yes")
    assert rc.conclusions_glue(broken)["rq1_verdict"].startswith("Not shown")


def test_tables_put_the_article_beside_every_model(runs):
    for table in (rc.rq1_table(runs), rc.rq2_table(runs), rc.rq3_table(runs)):
        assert table.columns[0] == "article (Pythia-160M)"
        assert table["article (Pythia-160M)"].ne("—").all()
        assert any(c.startswith("ours: tiny-") for c in table.columns)
    assert "2.54659e-11" in rc.rq1_table(runs).to_string()
    assert "29.49× at 2000 tokens" in rc.rq3_table(runs).to_string()


def test_every_summary_row_carries_its_n(runs):
    """No summary number without its count: each of our cells names its n (or is a count itself)."""
    import re

    for table in (rc.rq1_table(runs), rc.rq2_table(runs), rc.rq3_table(runs), rc.rq4_table(runs)):
        for column in (c for c in table.columns if c.startswith("ours: ")):
            for finding, cell in table[column].items():
                assert cell == "—" or "n = " in cell or "prompts" in cell or re.fullmatch(r"\d+/\d+( .*)?", cell), \
                    (finding, cell)
    for row in rc.decision_rows(runs):
        assert row["n"] and row["n"] != "—", row["operation"]
    table = rc.decision_table(rc.decision_rows(runs))
    assert {"cache vs fp32 / vs bf16 (%)", "time ÷ exact decode, median (range, n)"} <= set(table.columns)


def test_book_time_adds_set_up_chapters_and_benchmark(runs):
    table = ra.book_times_table(bench_record(), runs)
    total = 200.0 + 100.0 + sum(r["wall_time_s"] for r in runs.values())
    on_record = ra.book_time_rows(bench_record(), runs)[-1]["seconds"]
    assert on_record == pytest.approx(total, rel=1e-12)  # summed in another order: compare the floats, not their rounding
    assert table.loc["total on record", "seconds"] == ra.fmt(on_record, 4)
    assert ra.performance_glue(bench_record(), runs)["within"] == ("within" if total <= 3600 else "over")


def _job(name: str, started: str, wall: float, status: str = "computed", busy_pct: float = 0.0) -> dict:
    load = {"cpu_busy_pct": busy_pct, "load_1min": 0.1}
    return {"job": name, "kind": "chapter", "status": status, "inputs_hash": "0" * 64, "profile": "full",
            "parameters": {}, "outputs": {}, "wall_s": wall, "threads": 1, "load_before": load, "load_after": load,
            "commit": "abcdef1234567890", "started": started, "finished": "", "checked": ""}


def test_jobs_side_by_side_count_once_and_a_busy_timing_is_flagged(runs):
    """make book's jobs ran side by side: the total takes their span (first start to last end of
    those computed), not the sum of their wall times; a reused job names the commit it was computed
    at, and a timed job with other work beside it is marked BUSY."""
    bench = bench_record()
    bench["jobs"] = {"timing": _job("timing", "2026-12-03 10:00:00", 50.0, busy_pct=60.0),
                     "04": _job("04", "2026-12-03 10:00:50", 900.0), "05": _job("05", "2026-12-03 10:00:50", 1000.0),
                     "01": _job("01", "2026-12-03 09:00:00", 300.0, status="reused")}
    table = ra.book_times_table(bench, runs)
    assert table.loc["total on record", "seconds"] == ra.fmt(200.0 + 1050.0 + 100.0, 4)
    assert table.loc["chapter 04_cache_approximations", "in the total"].startswith("no")
    assert table.loc["chapter 01_cache_exactness", "job"] == "reused (computed at abcdef123456, ), 1 thread"
    bench["jobs"]["05"]["threads_used"] = [1, 2, 1, 2]  # it took the cores of jobs that had ended
    assert ra.book_times_table(bench, runs).loc["chapter 05_qwen3_switch", "job"] == "computed, 1 → 2 → 1 → 2 threads"
    assert table.loc["chapter 4's decode steps, timed alone", "machine around it"].startswith("BUSY")
    assert table.loc["chapter 04_cache_approximations", "job"] == "computed, 1 thread"
    assert ra.performance_glue(bench, runs)["total_min"] == ra.fmt(1350.0 / 60, 3)


def test_provenance_tables(runs):
    models = ra.models_table(runs)
    assert models.loc["tiny-llama", "weights sha256"] == "random-seed-0"  # tiny models are seeded, not files
    differing = copy.deepcopy(runs)
    differing["01_cache_exactness"]["packages"]["torch"] = "0.0-other"
    versions = ra.packages_table(differing).loc["torch", "version"]
    assert "0.0-other (chapters 01)" in versions and ";" in versions
    params = ra.parameters_table(runs)
    assert ("01_cache_exactness", "n_prompts") in params.index
    assert not any(p == "results_dir" for _, p in params.index)
    assert json.dumps(ra.reproducibility_glue(runs))  # plain strings, ready for glue


def _with(runs, chapter: str, change) -> dict:
    changed = copy.deepcopy(runs)
    for model, r in changed[NOTEBOOKS[chapter]]["numbers"].items():
        change(model, r)
    return changed


def test_exact_cache_verdict_is_computed_from_chapter_1(runs):
    """The guide's 'exact cache vs recomputation' row follows the fp64 run: a logit difference above the
    rounding tolerance, a NaN, or no fp64 run at all each take EXACT away."""
    def verdict(r):
        return {x["operation"]: x["verdict"] for x in rc.decision_rows(r)}["exact cache vs recomputation (ch. 1)"]

    def set_fp64(key, value):
        def change(model, by_dtype):
            by_dtype["float64"]["decode"][key] = value
        return change

    assert verdict(runs) is rc.EXACT
    assert verdict(_with(runs, "01", set_fp64("max_logit_diff", 1e-3))) is not rc.EXACT
    assert verdict(_with(runs, "01", set_fp64("max_logit_diff", float("nan")))) is not rc.EXACT
    assert verdict(_with(runs, "01", lambda m, r: r.pop("float64"))) is not rc.EXACT


def test_decision_guide_takes_in_the_frontier_methods(runs):
    """The guide said it sorts 'every operation we measured' but left out every press, h2o, tova
    and fp8 (the frontier's methods). They now join it, and a computed sentence says what it covers."""
    model = next(iter(runs["04_cache_approximations"]["numbers"]["table2"]))
    changed = copy.deepcopy(runs)
    ch4 = changed["04_cache_approximations"]["numbers"]
    ch4["frontier"] = {model: {"documents": ["a", "b"], "exact_cache_bytes": 1000.0, "refused": {"kvzip:x=1": "why"},
                               "prefill": 64, "decode": 32,
                               "ops": {"tova:compression_ratio=0.5": {"name": "tova", "mean_kl": 0.2,
                                                                     "top1_agreement_pct": 90.0, "cache_bytes": 500.0,
                                                                     "per_document": [{"top1_agreement_pct": 90.0}] * 8},
                                       "exact": {"name": "exact", "mean_kl": 0.0, "top1_agreement_pct": 100.0,
                                                 "cache_bytes": 1000.0}}}}
    rows = {r["operation"]: r for r in rc.decision_rows(changed)}
    assert rows["tova:compression_ratio=0.5"]["bytes_pct"] == 50.0
    assert rows["tova:compression_ratio=0.5"]["verdict"] is rc.COSTLY and "exact" not in rows
    assert "frontier's 2 documents" in rows["tova:compression_ratio=0.5"]["check"]
    assert rows["tova:compression_ratio=0.5"]["setting"] == "the frontier: 64 cached + 32 scored tokens"  # its panel
    text = rc.guide_coverage(changed, list(rows.values()), model)
    assert f"The guide sorts {len(rows)} operations" in text and "the 1 methods of chapter 4's frontier" in text
    assert "Left out: kvzip:x=1" in text
    ch4["frontier"] = {}
    text = rc.guide_coverage(changed, rc.decision_rows(changed), model)
    assert "The frontier's methods are not in it" in text


def test_wide_tables_scroll_in_their_own_box(built_book):
    """The book loads its stylesheet, and that stylesheet gives a results table its own horizontal
    scroll box (before it, chapter 5's per-policy table ran past the text column)."""
    import re

    _, html = built_book
    css = (html / "_static" / "custom.css").read_text()
    rule = re.search(r"table\.dataframe\s*\{([^}]*)\}", css)
    assert rule and "overflow-x: auto" in rule.group(1) and "display: block" in rule.group(1)
    page = (html / "book" / "chapters" / "01_cache_exactness.html").read_text()
    assert "_static/custom.css" in page


def test_appendix_notes_render_as_text_with_no_bold_number(built_book):
    """The appendices glue their sentences as Markdown shown literally (kvutils.report.text.glue_markdown):
    they render as text, not as "Markdown object", and no number in them is bold. The chapters and
    the conclusions bold their findings' claims (kvutils/report/findings.py, tests/unit/test_findings.py)."""
    import re

    _, html = built_book
    for name in ("appendix_a_reproducibility", "appendix_b_performance"):
        page = (html / "book" / "chapters" / f"{name}.html").read_text()
        strong = re.findall(r"<strong>(.*?)</strong>", page)
        assert not any(re.fullmatch(r"[-−\d.,/e%×+]+", s) for s in strong), name
        assert "Markdown object" not in page, name
    for name in [*NOTEBOOKS.values(), "06_conclusions"]:
        assert "Markdown object" not in (html / "book" / "chapters" / f"{name}.html").read_text(), name


def test_figures_read_at_the_page_width(runs):
    """Shrunk to the text column, every figure's axis labels and titles are at least the book's small
    font and no text is smaller than SMALLEST_TEXT_PX (before: 11-inch figures with 7-8 pt labels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvutils.report import bert_contrast as report_contrast
    from kvutils.report import cache_approximations as report_costs
    from kvutils.report import cache_exactness as report_exactness
    from kvutils.report import figures as report_figures
    from kvutils.report import frontier as report_frontier
    from kvutils.report import qwen3_switch as report_switch
    from kvutils.report import sense_probes as report_senses

    numbers = {ch: runs[NOTEBOOKS[ch]]["numbers"] for ch in ("01", "02", "03", "04", "05")}
    figures = {"chapter 1": report_exactness.plot_chapter1(numbers["01"]),
               "chapter 2": report_contrast.plot_chapter2(numbers["02"]),
               "chapter 3 probe": report_senses.plot_chapter3_probe(numbers["03"]),
               "chapter 3 attention": report_senses.plot_chapter3_attention(numbers["03"]),
               "decision guide": rc.plot_decision_guide(rc.decision_rows(runs), "tiny-llama"),
               "benchmark": ra.plot_performance(bench_record()),
               "chapter 4 decode": report_costs.plot_decode(numbers["04"]["decode"]),
               "chapter 4 bytes": report_costs.plot_bytes(numbers["04"]["bytes"]),
               "chapter 4 approximations": report_costs.plot_approximations(numbers["04"]["table2"]),
               "chapter 4 blend": report_costs.plot_blend_sweep(numbers["04"]["table2"]),
               "chapter 4 frontier": report_frontier.plot_frontier(numbers["04"]["frontier"]),
               "chapter 5 losses": report_switch.plot_losses(numbers["05"]),
               "chapter 5 quality vs cost": report_switch.plot_quality_cost(numbers["05"]),
               "chapter 5 cost vs exactness": report_switch.plot_cost_exactness(numbers["05"]),
               "chapter 5 patching map": report_switch.plot_patch_map(numbers["05"])}
    for name, fig in figures.items():
        assert report_figures.illegible_text(fig) == [], name
        assert report_figures.covered_or_clipped(fig) == [], name  # no legend over data, no label past its axes
        plt.close(fig)
    small = plt.figure(figsize=(11, 4))
    small.gca().set_xlabel("layer", fontsize=8)
    assert report_figures.illegible_text(small), "an 11-inch figure with 8-pt labels must be caught"
    plt.close(small)
