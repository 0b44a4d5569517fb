"""The conclusions page: the article's research questions answered from our five results files,
the article's figure beside ours, the reason where they differ, and the practitioner's decision
guide (a table and a figure, built in kvutils.report.guide). Every number and every verdict is
computed here from results."""
from __future__ import annotations

import math

from kvutils.core.article import article
from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.records import check_fields, load_results
from kvutils.core.results import results_path
from kvutils.report.cache_approximations import article_rows_by_spec
from kvutils.report.cache_exactness import recompute_label, recompute_mode

# the four tables are their own module, and so is the decision guide; the page (notebook 06) reads them
# through this one
from kvutils.report.conclusions_tables import (  # noqa: F401
    RQ3_OPS,
    causal_models,
    longest_steps,
    rq1_table,
    rq2_table,
    rq3_table,
    rq4_table,
)
from kvutils.report.guide import (  # noqa: F401
    ARTICLE_MODEL,
    COSTLY,
    EXACT,
    FP64_TOLERANCE,
    NEAR,
    OPEN,
    Verdict,
    chapter4_ops,
    chapter_numbers,
    decision_rows,
    decision_table,
    frontier_verdicts,
    guide_coverage,
    plot_decision_guide,
    stale_test,
    stale_word,
)
from kvutils.report.sense_probes import (
    best_depth,
    depth_rates,
    holm_above,
    layer_count,
    layer_tests,
)
from kvutils.report.tables import PageTable, rows_table
from kvutils.report.text import fmt
from kvutils.report.timing import ARTICLE_CONTEXT, against_published, speedup_grew, speedup_text
from kvutils.report.weights import weights_note

# our logit scale and the article model's are "near" within this factor: only then can its residue check ours
NEAR_SCALE = 2.0


def load_chapters(results_dir) -> dict[str, dict]:
    """Every chapter's results file; a missing one is an error naming it and how to produce it."""
    missing = [(n, name) for n, name in NOTEBOOKS.items() if not results_path(results_dir, name).is_file()]
    if missing:
        raise FileNotFoundError(
            "results_dir: no results for " + ", ".join(f"chapter {n} ({name}.json)" for n, name in missing)
            + f" in {results_dir}; run them first, e.g. make chapter N={missing[0][0]}")
    runs = {name: load_results(results_dir, name) for name in NOTEBOOKS.values()}
    check_fields(results_dir, "the conclusions page", lambda: conclusions_glue(runs), lambda: rq1_table(runs),
                 lambda: rq2_table(runs), lambda: rq3_table(runs), lambda: rq4_table(runs),
                 lambda: decision_table(decision_rows(runs)))
    return runs


def _placed(ours: dict[str, float], published: float) -> str:
    """Where our values (per model) lie against one published figure, naming the models: a
    placement, not a test."""
    models = ", ".join(ours)
    which = f"on {models}" if len(ours) == 1 else f"on each model scored ({models})"
    if all(v < published for v in ours.values()):
        return f"below it {which}"
    if all(v > published for v in ours.values()):
        return f"above it {which}"
    return f"on both sides of it or level with it, depending on the model ({models})"


def fp32_reason(fp32: dict, article_fp32: dict) -> str:
    """Our fp32 residue (each with its no-cache procedure) against the article's per-step figure,
    placed, not tested; the logit-scale explanation is named as an untested hypothesis, with the
    article's own model nearest our logit scale beside it."""
    art = article_fp32["pythia-160m"]
    parts, worst = [], {}
    for m, r in fp32.items():
        runs = [r[k] for k in ("decode", "decode_per_step") if k in r]
        worst[m] = max(d["max_logit_diff"] for d in runs)
        parts.append(f"{m}: " + ", ".join(
            f"{fmt(d['max_logit_diff'], 3)} ({recompute_label(d)})" for d in runs)
                     + f", median logit std {fmt(r['decode']['median_logit_std'], 3)}")
    head = ("fp32 residue, largest |logit difference| between cached and no-cache decoding — "
            f"{'; '.join(parts)} — against {ARTICLE_MODEL}'s {fmt(art['max_logit_diff'])} "
            f"({recompute_mode({'recompute': 'per_step'})}, {art['n']} prompts) at a median logit std of "
            f"{fmt(art['median_logit_std'], 3)}. Ours lies {_placed(worst, art['max_logit_diff'])} (a "
            "published figure without its per-prompt values: a placement, not a test). ")
    stds = [r["decode"]["median_logit_std"] for r in fp32.values()]
    typical = sorted(stds)[len(stds) // 2]
    nearest = min(article_fp32, key=lambda k: abs(math.log(article_fp32[k]["median_logit_std"] / typical)))
    near = article_fp32[nearest]
    hypothesis = ("Why they differ is not tested by these results. One untested hypothesis is that rounding "
                  "error grows with the size of the logits")
    ratio = max(near["median_logit_std"], typical) / min(near["median_logit_std"], typical)
    if ratio > NEAR_SCALE:
        return head + (f"{hypothesis}; none of the article's models has a logit scale near ours (nearest: "
                       f"{nearest}, {fmt(near['median_logit_std'], 3)} against our {fmt(typical, 3)}), so "
                       "its figures cannot check it")
    return head + (
        f"{hypothesis}; the article's own {nearest}, at a median logit std of "
        f"{fmt(near['median_logit_std'], 3)} (within {fmt(ratio, 2)}× of our {fmt(typical, 3)}), had a "
        f"residue of {fmt(near['max_logit_diff'], 3)}, "
        f"{fmt(near['max_logit_diff'] / max(worst.values()), 2)}× our largest, so scale alone would not "
        "account for it; the models, their weights and the kernels differ too")


ATTENTION_CAPTION = (f"Share of the later copy's attention per layer (mean over heads and items), against "
                     f"the article's range over {ARTICLE_MODEL}'s layers: the article gives only that range, "
                     "without per-item values, so this places our layers against it; it is not a paired test")


def attention_table(causal: dict, article_attention: dict) -> PageTable | None:
    """RQ2: where the later copy of the word looks, ours per layer against the article's range over
    Pythia's layers (placed, not tested), and the first token against the text by chapter 3's paired
    test per layer."""
    lo, hi = article_attention["to_continuation_min"], article_attention["to_continuation_max"]
    art_first = article_attention["to_first_token_max"]
    rows = {}
    for m, r in causal.items():
        cont, first = r["attention"]["continuation"], r["attention"]["first_token"]
        below, above = sum(v < lo for v in cont), sum(v > hi for v in cont)
        tests = layer_tests(r["attention"], "first_token", "continuation")
        rows[m] = {
            "on the text": f"{fmt(min(cont), 3)}–{fmt(max(cont), 3)}",
            f"layers below / within / above the article's {fmt(lo, 3)}–{fmt(hi, 3)}":
                f"{below} / {len(cont) - below - above} / {above} of {len(cont)}",
            "on the first token, largest": f"{fmt(max(first), 3)} ({r['first_token']!r})",
            f"layers above the article's largest first-token share, {fmt(art_first, 3)}":
                f"{sum(f > art_first for f in first)} of {len(first)}",
            "the first token against the text, paired per layer (chapter 3)":
                layer_count(tests, "the text") if tests is not None else "not tested: no per-item shares"}
    return rows_table(rows, "model") if rows else None


def precision_reason(bf16: dict, art_top1: float, weights: str) -> str:
    """The bf16 cache's top-1 agreement, ours against the article's published figure (placed, not
    tested), with the weights each model computes with; why they differ is not tested here."""
    if not bf16:
        return "bf16 was not among chapter 4's operations in this run"
    ours = "; ".join(f"{m}: a bf16 cache keeps {fmt(r['top1_agreement_pct'], 4)}% top-1 agreement (KL "
                     f"{fmt(r['mean_kl'], 3)} nats)" for m, r in bf16.items())
    placed = _placed({m: r["top1_agreement_pct"] for m, r in bf16.items()}, art_top1)
    return (f"{ours}, against {fmt(art_top1)}% for {ARTICLE_MODEL} (a published figure: ours lies {placed}; "
            f"a placement, not a test). {weights}. Why the agreement differs is not tested here: the models, "
            "their weights, the text and the logits' scale all differ, and that smaller logits move less "
            "under the same relative rounding of the cache is an untested hypothesis")


def breaks_exactness(table2: dict) -> str:
    """Which of chapter 4's operations changed the model's output distribution (mean KL > 0)."""
    kl = {spec: o["mean_kl"] for r in table2.values()
          for spec, o in chapter4_ops(r).items() if o["name"] != "exact"}
    if not kl:
        return "Chapter 4 scored no cache operation in this run"
    kept = sorted(spec for spec, v in kl.items() if v == 0)
    broken = sorted(spec for spec, v in kl.items() if not v >= 0)  # NaN: neither exact nor a cost
    spread = [v for v in kl.values() if v > 0]
    text = (f"{len(spread)} of the {len(kl)} operations scored in chapter 4 gave up exactness"
            + (f", with mean KL from {fmt(min(spread), 3)} to {fmt(max(spread), 3)} nats" if spread else ""))
    return (text + (f"; exact on this run: {', '.join(kept)}" if kept else "")
            + (f"; no valid score (NaN): {', '.join(broken)}" if broken else ""))


def rq2_verdict(causal: dict) -> str:
    """RQ2's finding: the old position at exactly 50 % (a tie by construction: its states are the same
    under both senses), and at a later copy of the word each depth tested against chance (a sign
    test over the words, Holm-corrected for the number of depths), the peak with its interval."""
    if not causal:
        return "No causal model was run in chapter 3"
    parts = []
    for m, r in causal.items():
        new = r["probe"]["new_position_pct"]
        rates = depth_rates(r["probe"], "new")
        best = best_depth(rates)
        held = holm_above(rates)
        test = (f"a sign test over the {rates[0].clusters}" if rates[0].clusters
                else "an exact binomial test over the items")
        parts.append(f"{m}: above chance at {len(held)} of {len(new)} depths (per depth, {test}, "
                     f"Holm-corrected for testing {len(new)} depths); at its best depth, {best.depth}, "
                     + best.sentence())
    chance = all(set(r["probe"]["old_position_pct"]) == {50.0} for r in causal.values())
    head = ("At the old position, a probe on the cached state of the word scores exactly 50% at every depth "
            f"of {', '.join(causal)}: a tie by construction, since that state is the same under both senses "
            "(chapter 2), so no probe can tell them apart, not a measured one. The same probe on a later "
            "copy of the word — "
            if chance else
            "This run does not show the old position at exactly 50% at every depth of every model (see "
            "chapter 3). The probe on a later copy of the word — ")
    return head + "; ".join(parts)


def speed_reason(ch4: dict, machine: dict, article_speedup: float) -> str:
    """RQ3's speed sentence: each model's speed-up at its longest context with its spread over repeat
    pairs and the conditions it was timed under, the article's figure placed against that spread."""
    longest = longest_steps(ch4)
    # the threads the steps were timed on: under `make book` they are timed alone, not in the chapter's lane
    timing = ch4.get("decode_timing") or {}
    cores, threads = timing.get("cores", machine["cores"]), timing.get("threads", machine["torch_threads"])
    where = timing.get("where", "in chapter 4's run")
    grew = {m: speedup_grew(d["steps"]) for m, d in ch4["decode"].items()}
    timed = [g for g in grew.values() if g is not None]
    trend = ("Only one context was timed, so no trend is measured; " if not timed else
             "In this run the speed-up grew with context on every model (an exact rank test over the repeat "
             "pairs puts each longer context's speed-ups above the shorter's at p < 0.05; chapter 4 gives "
             "each test), as expected where recomputation grows with the context and a cached step barely "
             "does; " if all(timed) else
             "In this run the speed-up did not grow detectably with context on every model (the rank test "
             "over the repeat pairs does not put every longer context above the shorter; see chapter 4); ")
    return ("Speed-up of the exact cache at the longest context: " + "; ".join(
        f"{m}, {s['context']} tokens: {speedup_text(s)}" for m, s in longest.items())
        + f", timed {where}, on {cores} cores and {threads} torch thread(s). For {ARTICLE_MODEL} at 2000 "
          "tokens on "
        "the article's 6-core CPU: " + "; ".join(
            f"{m}: {against_published(s, article_speedup, ARTICLE_CONTEXT, 'the article')}"
            for m, s in longest.items())
        + ". " + trend + "the size of the ratio depends on the machine and on how much of the model's cost "
                         "is fixed "
        "per step (output head, windowed layers)")


def conclusions_glue(runs: dict) -> dict[str, str]:
    """The verdicts and the reasons for every difference from the article, as sentences."""
    a = article()
    out: dict[str, str] = {}
    ch1 = chapter_numbers(runs, "01")
    fp64 = {m: r["float64"]["decode"] for m, r in ch1.items() if "float64" in r}
    exact = all(
        d["max_logit_diff"] <= FP64_TOLERANCE and d["identical"] == d["n_prompts"] for d in fp64.values())
    out["rq1_verdict"] = (
        f"Yes: in fp64 every cached greedy run matched recomputation on "
        f"{', '.join(f'{m} ({recompute_label(d)})' for m, d in fp64.items())} (largest |logit "
        f"difference| {fmt(max(d['max_logit_diff'] for d in fp64.values()), 3)}, below our "
        f"{FP64_TOLERANCE:g} tolerance for rounding)" if exact and fp64 else
        "Not shown by this run: " + ("fp64 was not run" if not fp64 else "an fp64 run exceeded the rounding "
                                                                         "tolerance"))
    fp32_runs = {m: r["float32"] for m, r in ch1.items() if "float32" in r}
    out["rq1_fp32_reason"] = fp32_reason(fp32_runs,
                                         a["e1_decode"]["fp32"]) if fp32_runs else "fp32 was not run"
    out["rq1_weights"] = weights_note(ch1)
    ch3 = chapter_numbers(runs, "03")
    out["rq2_verdict"] = rq2_verdict(causal_models(ch3))
    ch4 = chapter_numbers(runs, "04")
    table2 = ch4["table2"]
    bf16 = {m: chapter4_ops(r)["cast:dtype=bfloat16"]
            for m, r in table2.items() if "cast:dtype=bfloat16" in chapter4_ops(r)}
    out["rq3_precision_reason"] = precision_reason(bf16,
                                                   article_rows_by_spec()["cast:dtype=bfloat16"]["top1_pct"],
                                                   weights_note(bf16))
    out["rq3_breaks"] = breaks_exactness(table2)
    out["rq3_speed_reason"] = speed_reason(ch4, runs[NOTEBOOKS["04"]]["machine"],
                                           a["e4_decode_time"]["ctx_2000"]["speedup"])
    return out
