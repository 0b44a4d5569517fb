"""The conclusions and the appendices, on numbers made here: verdicts and sentences follow them, the
rerun commands are valid parameters for each chapter, the benchmark's targets are judged, and the
notebooks' sources type no result number (tests/book/test_summary_pages.py checks the quick run's)."""
import ast
import json
import re

import pytest
from conftest import bench_record

from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.paths import REPO_ROOT
from kvutils.models.registry import ModelNotAvailable
from kvutils.report import appendix as ra
from kvutils.report import conclusions as rc


def _defaults(chapter: str) -> dict:
    import papermill

    found = papermill.inspect_notebook(REPO_ROOT / "notebooks" / f"{NOTEBOOKS[chapter]}.ipynb")
    return {name: ast.literal_eval(p["default"]) for name, p in found.items()}


PLANS = {
    "01": "kvutils.studies.cache_exactness",
    "02": "kvutils.studies.sense_probes.study", "03": "kvutils.studies.sense_probes.study",
         "04": "kvutils.studies.cache_approximations.study", "05": "kvutils.studies.qwen3_switch.study"}


@pytest.mark.parametrize("chapter", list(ra.ARTICLE_MODELS))
def test_rerun_commands_are_valid_parameters_that_want_only_the_weights(chapter, no_model_loads):
    """Each appendix command names real parameters; here it stops only because the hub weights are absent."""
    import importlib

    from kvutils.studies.parameters import DECLARED

    plan = importlib.import_module(PLANS[chapter]).plan
    parameters = {**_defaults(chapter), **ra.ARTICLE_MODELS[chapter]}
    with pytest.raises(ModelNotAvailable) as err:
        plan(DECLARED[NOTEBOOKS[chapter]](**parameters))
    assert any(hub_id in str(err.value) for hub_id in ra.ARTICLE_MODELS[chapter].values())
    command = ra.rerun_commands().loc[f"{chapter} {NOTEBOOKS[chapter]}", "rerun and rebuild the book"]
    assert command.startswith(f"make chapter N={chapter} ")


def test_benchmark_targets_are_judged_from_the_ratios():
    window = "teacher forcing (window:size=128,sinks=4,reindex=false, float32): step-by-step ÷ fast path"
    int4 = "teacher forcing (quantize_naive:bits=4, float64): step-by-step ÷ fast path"
    met = {r["measure"]: r["met"] for r in ra.performance_rows(bench_record())}
    assert met["cached decode per token: kvutils ÷ transformers' generate"] is True
    assert met[window] is True and met[int4] is True
    slow = {r["measure"]: r["met"] for r in ra.performance_rows(
        bench_record(decode__ratio_kvutils_over_generate=1.2, teacher__max_logit_diff=1e-3, teacher_fp64__max_logit_diff=1e-6))}
    assert slow["cached decode per token: kvutils ÷ transformers' generate"] is False
    assert slow[window] is False and slow[int4] is False
    bound = [r for r in ra.performance_rows(bench_record()) if "bandwidth bound" in r["measure"]][0]
    assert bound["ratio"] == 2.0
    press = "teacher forcing (snapkv:compression_ratio=0.5,window=32,kernel=5, float32): step-by-step ÷ fast path"
    assert met[press] is True
    assert {r["measure"]: r["met"] for r in ra.performance_rows(bench_record(teacher_press__max_logit_diff=1e-3))}[press] is False
    policy = {r["measure"]: r["ratio"] for r in ra.performance_rows(bench_record()) if "decode-time policy" in r["measure"]}
    assert sorted(policy.values()) == [1.5, 30.0]  # TOVA's step path ÷ exact's step path and ÷ exact's fast path


def test_numbers_print_as_a_reader_expects():
    from kvutils.report.text import fmt

    assert fmt(1047.3, 3) == "1,047" and fmt(13860.0) == "13,860"  # never 1.05e+03
    assert fmt(1383.3, 4) == "1383" and fmt(0.000123456, 3) == "0.000123" and fmt(2.5e-13, 3) == "2.5e-13"
    assert fmt(24) == "24" and fmt(0.0) == "0" and fmt(None) == "n/a"


ARTICLE = {"to_continuation_min": 0.506078, "to_continuation_max": 0.677254, "to_first_token_max": 0.247605}


def _causal(continuation: list[float], first: list[float]) -> dict:
    return {"gemma3-270m": {"attention": {"continuation": continuation, "first_token": first}, "first_token": "<bos>"}}


def test_rq2_attention_places_every_layer_against_the_article_range():
    """Gemma's shares (0.136–0.479, all 18 layers below Pythia's lowest 0.506) once printed 'Our models
    do not send less attention … than Pythia' through a fallback branch. Now each layer is placed
    against the article's range, with the counts, and the caption says it is not a paired test."""
    gemma = [0.136 + i * (0.479 - 0.136) / 17 for i in range(18)]

    def row(causal):
        table = rc.attention_table(causal, ARTICLE)
        return {c.split(" (")[0].split(",")[0]: v for c, v in table.loc["gemma3-270m"].items()}

    untested = row(_causal(gemma, [0.5] * 18))
    assert untested["on the text"] == "0.136–0.479" and "not a paired test" in rc.ATTENTION_CAPTION
    assert untested["layers below / within / above the article's 0.506–0.677"] == "18 / 0 / 0 of 18"
    assert untested["layers above the article's largest first-token share"] == "18 of 18"
    # RQ2 counts layers with chapter 3's paired test per layer, never by comparing means
    assert untested["the first token against the text"] == "not tested: no per-item shares"
    causal = _causal(gemma, [0.5] * 18)
    causal["gemma3-270m"]["attention"]["per_item"] = {
        "first_token": [[0.5 + 0.01 * i] * 18 for i in range(8)],
        "continuation": [[g - 0.01 * i for g in gemma] for i in range(8)]}
    assert row(causal)["the first token against the text"] == "takes detectably more than the text in every one of 18 layers"
    mixed = row(_causal([0.4, 0.6, 0.7], [0.1, 0.1, 0.1]))
    assert mixed["layers below / within / above the article's 0.506–0.677"] == "1 / 1 / 1 of 3"
    assert mixed["layers above the article's largest first-token share"] == "0 of 3"
    assert row(_causal([0.8, 0.9], [0.0, 0.0]))["layers below / within / above the article's 0.506–0.677"] == "0 / 0 / 2 of 2"
    assert rc.attention_table({}, ARTICLE) is None


def test_bf16_sentence_places_ours_and_labels_the_scale_story_untested():
    """'the same relative rounding of the cache moves large logits further' was printed as an
    explanation; the results do not test it, so it is now named an untested hypothesis, with the
    weights the models compute with."""
    art_top1 = 86.3
    ours = {"m": {"top1_agreement_pct": 99.0, "mean_kl": 0.001}}
    text = rc.precision_reason(ours, art_top1, "Weights: m: Q4_K_M GGUF, dequantised to fp32")
    assert "moves large logits further" not in text and "untested hypothesis" in text
    # the one model scored is named, never "every model" (Table 2 may run on one model only)
    assert "lies above it on m; a placement" in text and "every model" not in text
    assert "Q4_K_M GGUF, dequantised to fp32" in text
    worse = {"m": {"top1_agreement_pct": 50.0, "mean_kl": 1.0}, "n": {"top1_agreement_pct": 90.0, "mean_kl": 0.1}}
    assert "on both sides of it or level with it, depending on the model (m, n)" in rc.precision_reason(
        worse, art_top1, "Weights: …")
    both = {"m": {"top1_agreement_pct": 99.0, "mean_kl": 0.001}, "n": {"top1_agreement_pct": 98.0, "mean_kl": 0.002}}
    assert "above it on each model scored (m, n)" in rc.precision_reason(both, art_top1, "Weights: …")
    assert "not among" in rc.precision_reason({}, art_top1, "Weights: …")


def _fp32(residue: float, std: float, per_step: float | None = None) -> dict:
    out = {"decode": {"max_logit_diff": residue, "median_logit_std": std, "recompute": "one_pass", "n_prompts": 24}}
    if per_step is not None:
        out["decode_per_step"] = {"max_logit_diff": per_step, "recompute": "per_step", "n_prompts": 1}
    return out


def test_fp32_residue_sentence_labels_procedures_and_does_not_explain_by_scale():
    """'rounding error scales with the size of the numbers rounded' was printed as the reason ours is
    smaller; the article's own Pythia-410M (logit std 3.25, residue 0.0063, ~95× ours) speaks against it.
    Now the procedures are named, the placement is not a test, and the scale story is an untested
    hypothesis set beside the article's model nearest our logit scale."""
    article_fp32 = rc.article()["e1_decode"]["fp32"]
    text = rc.fp32_reason({"m": _fp32(6.7e-5, 3.1, per_step=5e-5)}, article_fp32)
    assert "scales with the size" not in text and "untested hypothesis" in text
    assert "6.7e-05 (one pass, 24 prompts), 5e-05 (per step (article's procedure), 1 prompt)" in text
    assert "0.0119629 (per step (article's procedure), 24 prompts)" in text
    assert "pythia-410m, at a median logit std of 3.25" in text and f"{rc.fmt(0.00633657 / 6.7e-5, 2)}× our largest" in text
    far = rc.fp32_reason({"m": _fp32(3e-7, 0.16)}, article_fp32)  # a tiny model's logits: no article model near
    assert "none of the article's models has a logit scale near ours" in far and "× our largest" not in far
    assert "lies below it on m (a published" in text and "not a test" in text
    big = rc.fp32_reason({"m": _fp32(0.1, 70.0)}, article_fp32)
    assert "above it on m (a published" in big and "pythia-70m" in big  # nearest std 64.3


def test_weights_are_named_from_the_registry():
    from kvutils.report.weights import weights_note, weights_origin

    assert weights_origin("gemma3-270m") == "gemma3-270m: Q4_K_M GGUF, dequantised to fp32"
    assert weights_origin("smollm2-135m") == "smollm2-135m: Q4_1 GGUF, dequantised to fp32"
    assert "random weights" in weights_origin("tiny-llama")
    assert "GGUF quantisation of the weights is part of the model" in weights_note(["gemma3-270m", "tiny-llama"])
    assert "GGUF" not in weights_note(["tiny-llama"])


def test_breaking_exactness_is_read_from_the_kl():
    def table2(**kls):
        return {"m": {"plain": {"ops": {spec: {"name": spec.split(":")[0], "mean_kl": v} for spec, v in kls.items()}},
                      "chunks": None}}

    assert rc.breaks_exactness(table2(exact=0.0, a=0.5, b=0.25)) == (
        "2 of the 2 operations scored in chapter 4 gave up exactness, with mean KL from 0.25 to 0.5 nats")
    kept = rc.breaks_exactness(table2(a=0.5, b=0.0, c=float("nan")))
    assert "1 of the 3" in kept and "exact on this run: b" in kept and "no valid score (NaN): c" in kept


def _step(context: int, speedups: list[float] | None, speedup: float | None = None) -> dict:
    step = {"context": context, "cached_ms": 10.0, "uncached_ms": 10.0 * (speedup or sorted(speedups)[len(speedups) // 2]),
            "speedup": speedup or sorted(speedups)[len(speedups) // 2]}
    if speedups:
        step.update(speedups=speedups, cached_repeats_ms=[10.0] * len(speedups),
                    uncached_repeats_ms=[10.0 * x for x in speedups])
    return step


def test_speed_sentence_shows_the_spread_and_places_the_article():
    """The speed-up vs the article's 29.49× is stated with its spread over repeat pairs and the
    conditions; 'grew with context' needs the repeat pairs' ranges apart, not just the medians
    (the old sentence compared medians only, and printed no spread)."""
    machine = {"cores": 2, "torch_threads": 2}
    timing = {"where": "alone, as the build's first job, before the chapters ran side by side", "threads": 7, "cores": 9}
    apart = {"decode_timing": timing, "decode": {"m": {"steps": [_step(128, [2.0, 2.1, 2.2, 2.05, 2.15]),
                                                                 _step(2000, [40.0, 44.7, 49.0, 42.0, 46.0])]}}}
    text = rc.speed_reason(apart, machine, 29.49)
    assert "44.7× (ratio of the medians; per repeat pair 40–49×, n = 5)" in text
    assert "the article's 29.49× (one published figure, no spread given) lies below every one of our 5" in text
    assert "timed alone, as the build's first job, before the chapters ran side by side, on 9 cores and 7 torch thread(s)" in text
    assert "grew with context on every model (an exact rank test" in text
    three = {"decode_timing": timing, "decode": {"m": {"steps": [_step(128, [2.0, 2.1, 2.2]), _step(2000, [40.0, 44.7, 49.0])]}}}
    assert "did not grow detectably" in rc.speed_reason(three, machine, 29.49)  # 3 a side: p ≥ 0.1 whatever the data
    overlap = {"decode_timing": timing,
               "decode": {"m": {"steps": [_step(128, [2.0, 30.0, 3.0]), _step(2000, [25.0, 30.0, 31.0])]}}}
    text = rc.speed_reason(overlap, machine, 29.49)  # the medians grew (3 → 30); the ranges do not part
    assert "did not grow detectably" in text and "lies within the range" in text
    short = {"decode_timing": timing, "decode": {"m": {"steps": [_step(128, [2.0, 2.1, 2.2])]}}}
    assert "at 2000 tokens and ours at 128, so the two are not set against each other" in rc.speed_reason(
        short, machine, 29.49)
    old = {"decode": {"m": {"steps": [_step(128, None, 5.0), _step(2000, None, 10.0)]}}}
    text = rc.speed_reason(old, machine, 29.49)  # results written before repeats were kept
    assert "repeats not recorded" in text and "cannot be placed against a spread" in text
    assert "on 2 cores and 2 torch thread(s)" in text  # no decode_timing: the run's own machine


def test_appendix_b_sets_the_benchmark_step_beside_chapter_4():
    """smollm2 at 2,000 tokens: chapter 4 44.7× vs appendix B 49.6× were shown without spread or
    conditions. The appendix now shows both spreads, says under which conditions each was timed and
    whether the ranges overlap."""
    bench = bench_record(step_2000__speedups=[48.0, 49.6, 51.0], step_2000__threads=2)
    bench["model"] = "smollm2-135m"
    ch4 = {"decode_timing": {"where": "alone, as the build's first job, before the chapters ran side by side",
                             "threads": 2, "cores": 2},
           "decode": {"smollm2-135m": {"steps": [_step(2000, [42.0, 44.7, 46.0])]}}}
    runs = {"04_cache_approximations": {"numbers": ch4}}
    text = ra.step_agreement(bench, runs)
    assert "per repeat pair 48–51×, n = 3" in text and "per repeat pair 42–46×, n = 3" in text
    assert "The two ranges of repeat-pair speed-ups do not overlap" in text
    assert "after the chapters. It ran alone on 2 cores and 2 torch thread(s)." in text
    assert "alone, as the build's first job, before the chapters ran side by side, on 2 torch thread(s) of 2 cores" in text
    ch4["decode"]["smollm2-135m"]["steps"][0]["speedups"] = [45.0, 49.0, 50.0]
    assert "ranges of repeat-pair speed-ups overlap" in ra.step_agreement(bench, runs)
    assert "did not time smollm2-135m at 2000 tokens" in ra.step_agreement(bench, {})
    measured = {r["measure"]: r["measured"] for r in ra.performance_rows(bench)}
    assert "(one run each)" in measured["teacher forcing (window:size=128,sinks=4,reindex=false, float32): "
                                       "step-by-step ÷ fast path"]


NOTEBOOK_FILES = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOK_FILES, ids=[p.stem for p in NOTEBOOK_FILES])
def test_each_notebook_is_its_only_source_kept_in_canonical_form(path):
    """The notebooks are edited as themselves (no generator writes them, so nothing can drift from a
    second copy); each stays as Jupyter writes it, without outputs, its parameters cell first (after the
    findings box's placeholder where the page has one)."""
    import nbformat

    assert not list((REPO_ROOT / "tools").glob("*notebook*")), "a generator would make a second source"
    text = path.read_text()
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    assert nbformat.writes(nb) + "\n" == text, "not in nbformat's own layout (1-space indent, sorted keys)"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "committed with outputs"
    # the parameters cell comes first, or second after the findings box's placeholder (issue 50)
    first = code[1] if "display(pending()" in code[0].source else code[0]
    assert "parameters" in first.metadata.get("tags", [])
    # papermill reads every parameter (`papermill --help-notebook`, the parameter tables): it cannot
    # parse a line with a second "=" on it, and then drops that parameter without an error
    from papermill.translators import PythonTranslator

    assigned = [t.targets[0].id for t in ast.parse(first.source).body if isinstance(t, ast.Assign)]
    assert [p.name for p in PythonTranslator.inspect(first)] == assigned
    ids = [c.id for c in nb.cells]
    assert len(set(ids)) == len(ids)


def test_rq2_verdict_tests_each_depth_against_chance_and_names_the_tie():
    """'reaches 90.6%' was printed from the peak alone (chapter 3's 19/32 is p = 0.19 against chance);
    now every depth is tested, and the old position's exact 50% is named a tie by construction."""
    probe = {"n_items": 32, "old_position_pct": [50.0] * 3, "new_position_pct": [50.0, 59.375, 90.625]}
    text = rc.rq2_verdict({"g": {"probe": probe}})
    assert "a tie by construction" in text and "above chance at 1 of 3 depths" in text  # 19/32 is not
    assert "at its best depth, 2, right on 29 of 32" in text and "above chance" in text
    off = rc.rq2_verdict({"g": {"probe": {**probe, "old_position_pct": [50.0, 53.125, 50.0]}}})
    assert off.startswith("This run does not show the old position at exactly 50%")


def test_frontier_comparisons_are_counted_from_the_paired_verdicts():
    verdicts = [{"a": "snapkv", "b": "random", "n": 8, "effect": -0.1, "ci95": [-0.2, -0.05], "verdict": "a<b"},
                {"a": "adakv", "b": "snapkv", "n": 8, "effect": 0.0, "ci95": [0.0, 0.0], "verdict": "identical"},
                {"a": "h2o", "b": "tova", "n": 8, "effect": 0.01, "ci95": [-0.01, 0.03], "verdict": "no detectable difference"}]
    text = rc.frontier_verdicts({"frontier": {"m": {"ops": {}, "verdicts": verdicts}}})
    assert "m: 1 of 3 pairs of methods separated in mean KL at n = 8 documents, 1 identical" in text
    assert rc.frontier_verdicts({"frontier": {"m": {"ops": {}}}}).startswith("Chapter 4's frontier recorded no paired")


# Digits a summary page's own words may contain: section and chapter numbers, names of models,
# number formats and hashes.
_ALLOWED_NUMBERS = re.compile(r"RQ\d|fp32|fp64|bf16|top-1|sha256|Pythia-160M|BERT-base|Qwen3-0\.6B|"
                              r"chapters? [\d, and]+|Appendix [AB]|"
                              r"smollm2-135m|bits=4,group=32,residual=128|--prefill 256 --decode 256|mathjax@\d|"
                              r"gemma3-270m|qwen2\.5-0\.5b|Qwen2\.5-Coder-0\.5B-Instruct|Qwen2|Q5_0|N=0[15]")


@pytest.mark.parametrize("name", ["06_conclusions", "appendix_a_reproducibility", "appendix_b_performance"])
def test_summary_pages_type_no_result_number(name):
    """Every number in these pages' prose arrives by glue from the results files."""
    from kvutils.core.paths import REPO_ROOT

    notebook = json.loads((REPO_ROOT / "notebooks" / f"{name}.ipynb").read_text())
    for cell in notebook["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        prose = re.sub(r"\{glue(?::\w+)?\}`[^`]+`", "", "".join(cell["source"]))
        prose = _ALLOWED_NUMBERS.sub("", prose)
        assert not re.findall(r"\d", prose), f"{name}: a typed number in {prose!r}"


def test_what_the_chapters_qwen_would_cost_where_it_did_not_run_is_computed():
    """Appendix A names the chapters that ran without chapter 5's Qwen and estimates, from each one's
    own run time and the models' FLOPs per token, what adding it would cost; a chapter it joined has no row."""
    from kvutils.models.loading import per_token_weights

    runs = {"01_cache_exactness": {"parameters": {"models": "smollm2-135m"}, "wall_time_s": 600.0},
            "03_sense_probes": {"parameters": {"models": "smollm2-135m,qwen2.5-0.5b"}, "wall_time_s": 60.0},
            "05_qwen3_switch": {"parameters": {"models": "smollm2-135m"}, "wall_time_s": 900.0}}
    table, glue = ra.qwen_left_out(runs)
    assert list(table.index) == ["01_cache_exactness", "05_qwen3_switch"]  # chapter 5 too, where it ran on SmolLM2 alone
    qwen, smol = (sum(per_token_weights(n)[k] for k in ("layers", "head")) for n in ("qwen2.5-0.5b", "smollm2-135m"))
    assert 3.5 < qwen / smol < 3.8  # the design's "about 3.7x SmolLM2's FLOPs per token"
    extra_min = 600.0 * qwen / smol / 60
    assert table.loc["01_cache_exactness", "with the Qwen: estimated extra (min)"] == f"{extra_min:.3g}"
    assert table.loc["05_qwen3_switch", "with the Qwen: estimated extra (min)"] == f"{900.0 * qwen / smol / 60:.3g}"
    assert glue["qwen_left_out"].startswith(
        f"qwen2.5-0.5b is left out of 01_cache_exactness, 05_qwen3_switch. Adding it would take an estimated "
        f"{1500.0 * qwen / smol / 60:.3g} more minutes")
    assert "GB for its weights in fp64" in glue["qwen_left_out"]
    assert ra.qwen_left_out({})[1] == {"qwen_left_out": "every chapter that could run qwen2.5-0.5b ran it"}
