"""The conclusions and the appendices: verdicts follow the numbers, missing inputs are named, the
rerun commands are valid parameters for each chapter, and the benchmark's targets are judged."""
import ast
import copy
import json

import pytest

from kvutils import report_appendix as ra
from kvutils import report_conclusions as rc
from kvutils.chapters import NOTEBOOKS
from kvutils.models import ModelNotAvailable
from kvutils.paths import REPO_ROOT


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
    assert by_op["exact cache vs recomputation (ch. 1)"]["verdict"] is rc.EXACT
    assert by_op["prefix reuse across continuations (ch. 1)"]["verdict"] is rc.EXACT
    assert [r for r in rows if r["operation"].startswith("LoRA switch, tail patch")][0]["verdict"] is rc.EXACT
    ops = [r for r in rows if ":" in r["operation"] or r["operation"] == "exact"]
    assert ops and "exact" not in by_op  # the reference itself is not an operation
    for r in ops:
        expected = rc.EXACT if r["kl"] == 0 else rc.NEAR if r["top1"] >= 99 else rc.COSTLY
        assert r["verdict"] is expected, r["operation"]
    assert by_op["quantize_naive:bits=4"]["bytes_pct"] < 50  # 4 bits + scales against 32-bit floats


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


def _defaults(chapter: str) -> dict:
    import papermill

    found = papermill.inspect_notebook(REPO_ROOT / "notebooks" / f"{NOTEBOOKS[chapter]}.ipynb")
    return {name: ast.literal_eval(p["default"]) for name, p in found.items()}


PLANS = {"01": "kvutils.exactness", "02": "kvutils.senses_study", "03": "kvutils.senses_study",
         "04": "kvutils.approx_study", "05": "kvutils.switch"}


@pytest.mark.parametrize("chapter", list(ra.ARTICLE_MODELS))
def test_rerun_commands_are_valid_parameters_that_want_only_the_weights(chapter, no_model_loads):
    """Each appendix command names real parameters; here it stops only because the hub weights are absent."""
    import importlib

    plan = importlib.import_module(PLANS[chapter]).plan
    parameters = {**_defaults(chapter), **ra.ARTICLE_MODELS[chapter]}
    with pytest.raises(ModelNotAvailable) as err:
        plan(**parameters)
    assert any(hub_id in str(err.value) for hub_id in ra.ARTICLE_MODELS[chapter].values())
    command = ra.rerun_commands().loc[f"{chapter} {NOTEBOOKS[chapter]}", "rerun and rebuild the book"]
    assert command.startswith(f"make chapter N={chapter} ")


def _bench(**changes) -> dict:
    bench = {"model": "m", "load": {"first_load_s": 60.0, "cached_load_s": 2.0, "speedup": 30.0, "converts": True},
             "decode": {"kvutils_ms_per_token": 10.0, "generate_ms_per_token": 10.0, "ratio_kvutils_over_generate": 1.0},
             "recompute": {"one_pass_s": 1.0, "per_step_s": 10.0, "speedup": 10.0},
             "teacher": {"op": "window:size=128,sinks=4,reindex=false", "dtype": "float32", "fast_s": 1.0,
                         "step_s": 20.0, "speedup": 20.0, "max_logit_diff": 1e-5},
             "teacher_fp64": {"op": "quantize_naive:bits=4", "dtype": "float64", "fast_s": 1.0, "step_s": 20.0,
                              "speedup": 20.0, "max_logit_diff": 1e-13},
             "step_2000": {"context": 2000, "cached_ms": 100.0, "uncached_ms": 5000.0, "speedup": 50.0, "bound_ms": 50.0},
             "bandwidth_gb_s": 7.0,
             "switch": {"1": {"tail_patch_ms": 10.0, "recompute_ms": 100.0, "time_fraction": 0.1, "flops_fraction": 0.04}},
             "machine": {"cores": 2, "torch_threads": 2}, "wall_time_s": 100.0, "setup_s": 200.0}
    for path, value in changes.items():
        section, key = path.split("__")
        bench[section][key] = value
    return bench


def test_benchmark_targets_are_judged_from_the_ratios():
    window = "teacher forcing (window:size=128,sinks=4,reindex=false, float32): step-by-step ÷ fast path"
    int4 = "teacher forcing (quantize_naive:bits=4, float64): step-by-step ÷ fast path"
    met = {r["measure"]: r["met"] for r in ra.performance_rows(_bench())}
    assert met["cached decode per token: kvutils ÷ transformers' generate"] is True
    assert met[window] is True and met[int4] is True
    slow = {r["measure"]: r["met"] for r in ra.performance_rows(
        _bench(decode__ratio_kvutils_over_generate=1.2, teacher__max_logit_diff=1e-3, teacher_fp64__max_logit_diff=1e-6))}
    assert slow["cached decode per token: kvutils ÷ transformers' generate"] is False
    assert slow[window] is False and slow[int4] is False
    bound = [r for r in ra.performance_rows(_bench()) if "bandwidth bound" in r["measure"]][0]
    assert bound["ratio"] == 2.0


def test_book_time_adds_set_up_chapters_and_benchmark(runs):
    table = ra.book_times_table(_bench(), runs)
    total = 200.0 + 100.0 + sum(r["wall_time_s"] for r in runs.values())
    assert table.loc["total on record", "seconds"] == ra.fmt(total, 4)
    assert ra.performance_glue(_bench(), runs)["within"] == ("within" if total <= 1800 else "over")


def test_chapters_run_in_lanes_count_once(runs):
    """Lanes run side by side: the total takes their wall time, not the sum of their chapters."""
    bench = _bench()
    bench["chapter_lanes"] = {"lanes": [["04", "02", "03"], ["01", "05"]], "threads_per_lane": 1, "wall_time_s": 1000.0}
    table = ra.book_times_table(bench, runs)
    assert table.loc["total on record", "seconds"] == ra.fmt(200.0 + 1000.0 + 100.0, 4)
    assert table.loc["chapter 04_cache_approximations (lane 1, one thread)", "in the total"].startswith("no")
    assert ra.performance_glue(bench, runs)["total_min"] == ra.fmt(1300.0 / 60, 3)


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


def test_numbers_print_as_a_reader_expects():
    from kvutils.report import fmt

    assert fmt(1047.3, 3) == "1,047" and fmt(13860.0) == "13,860"  # never 1.05e+03
    assert fmt(1383.3, 4) == "1383" and fmt(0.000123456, 3) == "0.000123" and fmt(2.5e-13, 3) == "2.5e-13"
    assert fmt(24) == "24" and fmt(0.0) == "0" and fmt(None) == "n/a"
