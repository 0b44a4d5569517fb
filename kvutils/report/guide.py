"""The conclusions' decision guide: every cache operation the chapters scored on one model, sorted
into exact (a theorem, or a tie by construction), near-exact and costly (each only where a paired
test separates the operation from the threshold, or, for stale reuse, from the tail patch), and
"not separated" otherwise; each row with its n, its interval, its bytes against an fp32 and a bf16
cache and its time against the exact decode (a table and a figure), what the guide covers, and how
many of chapter 4's frontier comparisons its paired tests separated."""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import pandas as pd

from kvutils.cache.accept_report import threshold_test
from kvutils.cache.methods.cast import Cast
from kvutils.core import compare
from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.checks import check_number
from kvutils.core.compare import IDENTICAL, Paired
from kvutils.lora.switching import nan_max
from kvutils.report.cache_approximations import article_rows_by_spec
from kvutils.report.figures import styled
from kvutils.report.guide_retrieval import axis_text, loses_keys, loss_clause, retrieval_axis
from kvutils.report.names import human
from kvutils.report.switch_findings import pair as switch_pair
from kvutils.report.tables import page_table
from kvutils.report.text import fmt
from kvutils.report.timing import spread
from kvutils.studies.qwen3_switch.study import TOLERANCE as SWITCH_TOLERANCE

ARTICLE_MODEL = "Pythia-160M"
# |logit difference| below which fp64 decoding counts as equal up to rounding (the theorem's test)
FP64_TOLERANCE = 1e-9
CHUNK_OPS = ("chunk_reuse", "chunk_blend")  # they compute their own prefill: their time is not the decode's


def chapter_numbers(runs: dict, n: str) -> dict:
    """Chapter n's numbers (n as "01" … "05") from the runs `load_chapters` read."""
    return runs[NOTEBOOKS[n]]["numbers"]


def chapter4_ops(run: dict) -> dict:
    """One Table-2 model's operations, the plain and the chunk rows together."""
    return {**(run["plain"] or {}).get("ops", {}), **(run["chunks"] or {}).get("ops", {})}


@dataclass(frozen=True)
class Verdict:
    name: str
    label: str
    colour: str


EXACT = Verdict("exact", "exact (to rounding): adopt as a pure saving", "#2a9d8f")
NEAR = Verdict("near-exact", "near-exact here (tested above the threshold): confirm on your model", "#e9c46a")
COSTLY = Verdict("costly", "costs quality (tested): measure before buying", "#e76f51")
OPEN = Verdict("not separated", "not separated at this n: no verdict, measure on your model", "#b8b8b8")
VERDICTS = (EXACT, NEAR, COSTLY, OPEN)


def _tested(test: compare.Paired) -> Verdict:
    return NEAR if test.verdict == compare.A_HIGHER else COSTLY if test.verdict == compare.A_LOWER else OPEN


def decision_rows(runs: dict, near_exact_pct: float = compare.NEAR_EXACT_PCT,
                  model: str | None = None) -> list[dict]:
    """One row per cache operation, for `model` (default: the first Table-2 model; a model Table 2 did
    not run gets the frontier's operations only): verdict, our top-1 agreement (with n and, for
    chapter 4's operations, its 95 % interval over documents) and KL, the article's top-1, cache bytes
    against an fp32 and a bf16 cache, the time against the exact decode, and the test."""
    check_number("near_exact_pct", near_exact_pct, 0, 100, low_inclusive=False)
    ch4 = chapter_numbers(runs, "04")
    model = model or next(iter(ch4["table2"]))
    run = ch4["table2"].get(model) or {"plain": None, "chunks": None}
    rows = chapter1_rows(chapter_numbers(runs, "01")) + chapter5_rows(runs)
    art = article_rows_by_spec()
    plain = run["plain"]
    for spec, o in chapter4_ops(run).items():
        if o["name"] == "exact":
            continue
        chunk = o["name"] in CHUNK_OPS
        source = plain if spec in ((plain or {}).get("ops") or {}) else run["chunks"]
        rows.append(_op_row(spec, o, near_exact_pct, art, source,
                            None if chunk else plain["exact_cache_bytes"]
                            if plain else None,
                            "kvutils' acceptance test, Table 2") | {"setting": setting(source)})
    front = ch4.get("frontier", {}).get(model)
    for spec, o in _frontier_only(run, front).items():
        rows.append(_op_row(spec, o, near_exact_pct, art, front, front["exact_cache_bytes"],
                            f"acceptance test, the frontier's {_count(len(front['documents']), 'document')}")
                    | {"setting": setting(front, "the frontier")})
    # matched budgets' levels
    levels = {spec: o.get("level") for spec, o in (front or {}).get("ops", {}).items()}
    return [both_axes(r, retrieval_axis(ch4.get("retrieval") or {}, model, r["operation"],
                                        levels.get(r["operation"])))
            for r in rows]


EXACTNESS = "chapters 1 and 5: the exact cache and the LoRA switch"  # the setting of the theorem rows


def setting(run: dict, name: str = "Table 2") -> str:
    """The setting a chapter-4 row was measured in, for its panel: "Table 2: 256 cached + 256 scored
    tokens"."""
    return f"{name}: {run['prefill']:,} cached + {run['decode']:,} scored tokens"


def both_axes(row: dict, axis: dict | None) -> dict:
    """The row with its retrieval axis: an operation is free only where both axes say so, so a
    retrieval loss (a test or the construction) turns a near-exact or untested row costly."""
    row = row | {"retrieval": axis}
    if loses_keys(axis) and row["verdict"] in (NEAR, OPEN):
        row |= {"verdict": COSTLY, "test": f"{row['test']}; {loss_clause(axis)}"}
    return row


def _row(operation: str, verdict: Verdict, top1: float | None, n: str, **extra) -> dict:
    """A guide row: the fields every row has, then this row's."""
    row = dict(operation=operation, verdict=verdict, top1=top1, n=n, top1_ci=None, kl=None, article_top1=None,
               bytes_pct=100.0, bytes_bf16_pct=None, time_ratio=None, test="", check="", retrieval=None,
               setting=EXACTNESS)
    return row | extra


def chapter1_rows(ch1: dict) -> list[dict]:
    """The exact cache and prefix reuse: theorems, judged in fp64 where rounding is far below the
    tolerance."""
    decode = [r[d]["decode"] for r in ch1.values() for d in r]
    top1 = min(d["argmax_agreement_pct"] for d in decode)
    n = f"{sum(d['n_prompts'] for d in decode)} prompt runs"
    fp64_decode = [r["float64"]["decode"] for r in ch1.values() if "float64" in r]
    exact_decode = bool(fp64_decode) and all(
        d["max_logit_diff"] <= FP64_TOLERANCE and d["identical"] == d["n_prompts"] for d in fp64_decode)
    fp64 = [r["float64"]["prefixes"] for r in ch1.values() if "float64" in r]
    exact_prefix = (all(p["max_diff_across_continuations"] <= FP64_TOLERANCE for p in fp64) if fp64 else
                    all(r[d]["prefixes"]["bit_identical"] == r[d]["prefixes"]["n_prefixes"]
                        for r in ch1.values() for d in r))
    theorem = "theorem; tested on every architecture"
    return [_row("exact cache vs recomputation (ch. 1)", EXACT if exact_decode else OPEN, top1, n,
                 article_top1=100.0,
                 check=theorem, test=f"fp64 |logit difference| ≤ {FP64_TOLERANCE:g}" if exact_decode else
                 "fp64 not within the rounding tolerance: see chapter 1"),
            _row("prefix reuse across continuations (ch. 1)", EXACT if exact_prefix else OPEN, None,
                 f"{sum(r[d]['prefixes']['n_prefixes'] for r in ch1.values() for d in r)} prefixes",
                 check=theorem,
                 test=prefix_test(ch1, exact_prefix))]


def prefix_test(ch1: dict, exact_prefix: bool) -> str:
    """What chapter 1 compares for prefix reuse (a prefix's cached keys and values across
    continuations; no token is decoded, so the row has no top-1 agreement), per dtype."""
    parts = []
    for dtype in dict.fromkeys(d for r in ch1.values() for d in r):
        p = [r[dtype]["prefixes"] for r in ch1.values() if dtype in r]
        same, n = sum(x["bit_identical"] for x in p), sum(x["n_prefixes"] for x in p)
        worst = max(x["max_diff_across_continuations"] for x in p)
        parts.append(f"{dtype}: {int(same)} of {int(n)} bit-identical, largest difference {fmt(worst, 2)}")
    rule = (f"fp64 within {FP64_TOLERANCE:g}" if exact_prefix else "not within the fp64 tolerance: see "
                                                                   "chapter 1")
    return f"cached keys and values compared, no token decoded ({'; '.join(parts)}); {rule}"


def chapter5_rows(runs: dict) -> list[dict]:
    """The LoRA switch at the deepest k: the tail patch (a theorem, within chapter 5's tolerance for its
    precision) and stale reuse, judged by chapter 5's own paired test on its held-out examples."""
    ch5 = chapter_numbers(runs, "05")
    dtype = runs[NOTEBOOKS["05"]].get("parameters", {}).get("dtype", "float32")
    tolerance = SWITCH_TOLERANCE.get(dtype, FP64_TOLERANCE)
    rows = []
    for m, r in ch5.items():
        k = max(r["k_values"])
        patch, stale = (r["switch"]["scores"][f"tail{k}"][p] for p in ("tail_patch", "stale"))
        exact = patch["max_abs_logit_diff"] <= tolerance
        rows.append(_row(f"LoRA switch, tail patch (ch. 5, {m}, k = {k})", EXACT if exact else OPEN,
                         patch["top1_agree_pct"], f"{patch['n']} examples", kl=patch["kl_mean"],
                         switch_cost=r["cost"]["per_k"][str(k)]["tail_time_fraction"],
                         check="theorem (tail patch); chapter 5",
                         test=f"largest |logit difference| {fmt(patch['max_abs_logit_diff'], 2)} against the "
                              f"recompute; {dtype} tolerance {tolerance:g}"))
        active = r["switch"]["scores"][f"activated{k}"]["activated"]
        base_cache = nan_max(r["switch"]["cache_layers"][f"activated{k}"]["prefix_vs_base"])
        held = r["switch"]["heldout"]
        rows.append(_row(f"LoRA switch, activated adapter (ch. 5, {m}, k = {k})",
                         EXACT if base_cache == 0 and active["max_abs_logit_diff"] <= tolerance else OPEN,
                         active["top1_agree_pct"], f"{active['n']} examples", kl=active["kl_mean"],
                         check="theorem (activated adapter); chapter 5", switch_cost=0.0,
                         held=_held(held[f"activated{k}"]["activated"]),
                         test=f"prefix K/V against the base cache {fmt(base_cache, 2)}; largest |logit "
                              f"difference| {fmt(active['max_abs_logit_diff'], 2)} against one adapter pass; "
                              "no switch work"))
        test = stale_test(r, k)
        verdict = COSTLY if test.verdict == compare.A_LOWER else OPEN
        rows.append(_row(f"LoRA switch, stale cache (ch. 5, {m}, k = {k})", verdict, stale["top1_agree_pct"],
                         f"{stale['n']} examples (top-1); {test.n} {test.unit} (test)", kl=stale["kl_mean"],
                         held=_held(held[f"tail{k}"]["stale"]),
                         check="chapter 5",
                         test=f"held-out accuracy vs the tail patch {fmt(100 * test.effect, 3)} "
                                                 f"points ({stale_word(test)}, n = {test.n}, p = "
                                                 f"{test.p:.2g})"))
    return rows


def _held(a: dict) -> tuple[float, float]:
    """Held-out accuracy (%) and AUC of one (adapter, policy): a bias shift moves the first only."""
    return a["accuracy_pct"], a["auc"]


def stale_test(r: dict, k: int) -> compare.Paired:
    """Chapter 5's paired test on its held-out examples, clustered by document: stale reuse against the
    tail patch at k."""
    return switch_pair(r, (f"tail{k}", "stale"), (f"tail{k}", "tail_patch"), "stale", "tail patch")


def stale_word(test: compare.Paired) -> str:
    """What `stale_test` found, in words."""
    if test.separated:
        return "stale lower" if test.verdict == compare.A_LOWER else "stale higher"
    return {compare.IDENTICAL: "identical answers", compare.CANNOT: "no verdict possible"}.get(
        test.verdict, "no detectable difference")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def time_ratios(o: dict, run: dict) -> list[float] | None:
    """Per document, the operation's scoring time over the exact cache's decode pass on the same
    document (None where the run kept no per-document times, the operation decodes token by token,
    or it computes its own prefill, as chunk reuse does: no like-for-like ratio then)."""
    own, exact = o.get("seconds_per_document"), run.get("exact_decode_seconds_per_document")
    if not own or not exact or len(own) != len(exact) or o.get("name") in CHUNK_OPS:
        return None
    return [a / b for a, b in zip(own, exact) if b > 0] or None


def _bf16_factor(run: dict) -> float:
    """Bytes of the run's exact cache over a bf16 cache's (2 for an fp32 run)."""
    return Cast.DTYPES[run.get("dtype", "float32")] / Cast.DTYPES["bfloat16"]


def _op_row(spec: str, o: dict, near_exact_pct: float, art: dict, run: dict, exact_bytes: float | None,
            check: str) -> dict:
    docs = [d["top1_agreement_pct"] for d in o.get("per_document") or []]
    test = threshold_test(spec, docs, near_exact_pct) if docs else None
    if o["mean_kl"] == 0:
        # every document's distribution unchanged: a tie the operation's construction explains
        verdict = EXACT
    else:
        verdict = _tested(test) if test is not None else OPEN
    bytes_pct = 100.0 * o["cache_bytes"] / exact_bytes if exact_bytes else 100.0
    ci = tuple(near_exact_pct + x for x in test.ci95) if test is not None and test.ci95 is not None else None
    return _row(spec, verdict, o["top1_agreement_pct"], f"{len(docs)} documents" if docs else "—", top1_ci=ci,
                kl=o["mean_kl"], article_top1=art[spec]["top1_pct"] if spec in art else None,
                bytes_pct=bytes_pct,
                bytes_bf16_pct=bytes_pct * _bf16_factor(run) if exact_bytes else None,
                time_ratio=time_ratios(o, run), check=check,
                test=threshold_clause(test, near_exact_pct) if test is not None and o["mean_kl"] != 0 else
                ("mean KL 0 on every document (by construction)" if o["mean_kl"] == 0 else "no per-document "
                                                                                           "values"))


def threshold_clause(test: compare.Paired, near_exact_pct: float) -> str:
    """The top-1 test against the threshold, short: the side, or why there is none, with p."""
    at = f"{fmt(near_exact_pct)}%"
    if test.verdict == compare.A_HIGHER:
        return f"above {at} (p = {test.p:.2g})"
    if test.verdict == compare.A_LOWER:
        return f"below {at} (p = {test.p:.2g})"
    if test.verdict == compare.CANNOT:
        return f"no verdict possible at n = {test.n} ({test.withheld()})"
    withheld = f"; {test.withheld()}" if test.withheld() else ""
    return f"no detectable difference from {at} (p = {test.p:.2g}{withheld})"


def _frontier_only(table2_run: dict, frontier_run: dict | None) -> dict:
    """The frontier's operations that Table 2 did not score (an operation both ran keeps Table 2's
    numbers, scored on more documents), the exact reference left out."""
    if not frontier_run:
        return {}
    table2 = chapter4_ops(table2_run)
    return {spec: o for spec, o in frontier_run["ops"].items() if spec not in table2 and o["name"] != "exact"}


def guide_coverage(runs: dict, rows: list[dict], model: str) -> str:
    """What the decision guide covers and what it leaves out, counted from the results."""
    ch4, ch5 = chapter_numbers(runs, "04"), chapter_numbers(runs, "05")
    run, front = ch4["table2"][model], ch4.get("frontier", {}).get(model)
    table2 = [s for s, o in chapter4_ops(run).items() if o["name"] != "exact"]
    extra = _frontier_only(run, front)
    switch = sum(1 for r in rows if r["operation"].startswith("LoRA switch"))
    ch1_rows = sum(1 for r in rows if r["operation"].endswith("(ch. 1)"))
    text = (f"The guide sorts {len(rows)} operations: chapter 1's {ch1_rows} properties of the exact cache "
            f"(over every chapter-1 model), chapter 5's LoRA switch ({switch} rows, "
            f"{', '.join(ch5) or 'none'}), and on {model} chapter 4's {len(table2)} Table-2 operations")
    if front:
        text += (f" and the {len(extra)} methods of chapter 4's frontier that Table 2 does not score "
                 "(presses, decode-time policies, quantised caches; on the frontier's "
                 f"{_count(len(front['documents']), 'document')})")
        refused = sorted(front.get("refused", {}))
        if refused:
            text += f". Left out: {', '.join(refused)}, which {model} refused"
    else:
        text += (f". The frontier's methods are not in it: the frontier was not run on {model}"
                 + (f" (it ran on {', '.join(ch4.get('frontier', {}))})" if ch4.get("frontier") else ""))
    ran = sum(1 for r in rows if r["retrieval"])
    if ran:
        text += (f". The retrieval column reads chapter 4's long-range retrieval on {model} for the {ran} of "
                 "them it ran (keys retrieved with the question in the compressed prefill / before it); a "
                 "retrieval loss turns a row costly whatever its top-1 agreement")
    elif ch4.get("retrieval"):
        text += f". The retrieval column is empty: chapter 4's retrieval ran no gated prompts on {model}"
    others = [m for m in ch4["table2"] if m != model]
    if others:
        text += f". Chapter 4's rows for {', '.join(others)} are in chapter 4, not in the guide"
    return text


def frontier_verdicts(ch4: dict) -> str:
    """How many of the frontier's pairwise comparisons (kvutils.core.compare, paired over its documents)
    separated two methods, per model; the guide's colours test each method against the threshold instead."""
    parts = []
    for m, run in ch4.get("frontier", {}).items():
        tests = [Paired.from_dict({"p": math.nan, **v}) for v in run.get("verdicts") or []]
        if not tests:
            continue
        sizes = sorted({t.n for t in tests})
        parts.append(f"{m}: {sum(t.separated for t in tests)} of {len(tests)} pairs of methods separated in "
                     f"mean KL at n = {'/'.join(str(n) for n in sizes)} documents, "
                     f"{sum(t.verdict == IDENTICAL for t in tests)} identical (ties by construction, named "
                     "in chapter 4), the rest no detectable difference")
    if not parts:
        return ("Chapter 4's frontier recorded no paired comparisons in this run, so the guide ranks none of "
                "its methods against another")
    return ("Which of chapter 4's methods beats which is decided there, by paired tests over documents ("
            + "; ".join(parts) + "); the guide's colours test each method against the threshold on one "
                                 "model, not "
            "against each other")


def _top1_text(r: dict) -> str:
    if r["top1"] is None:
        return "—"
    ci = f" [{fmt(r['top1_ci'][0], 4)}, {fmt(r['top1_ci'][1], 4)}]" if r["top1_ci"] else ""
    return f"{fmt(r['top1'], 4)}{ci}, n = {r['n']}"


def _time_text(ratios: list[float] | None) -> str:
    if not ratios:
        return "—"
    s = spread(ratios)
    return f"{fmt(s['median'], 3)} ({fmt(s['min'], 3)}–{fmt(s['max'], 3)}, n = {s['n']})"


def decision_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame([{
        "operation": r["operation"], "verdict": r["verdict"].name,
        "top-1 agreement (%) [95 % interval], n": _top1_text(r),
        f"article (%), {ARTICLE_MODEL.split('-')[0]}": fmt(
            r["article_top1"]) if r["article_top1"] is not None else "—",
        "mean KL (nats)": fmt(r["kl"], 3) if r["kl"] is not None else "—",
        "cache vs fp32 / vs bf16 (%)": fmt(r["bytes_pct"], 3) + (
            f" / {fmt(r['bytes_bf16_pct'], 3)}" if r["bytes_bf16_pct"] is not None else ""),
        "time ÷ exact decode, median (range, n)": _time_text(r["time_ratio"]),
        "test; checked by; keys retrieved (%) with / before the question": f"{r['test']}; {r['check']}" + (
            f"; retrieval {axis_text(r['retrieval'])}" if r["retrieval"] else "")} for r in rows])
    return page_table(table.set_index("operation"),
                      short={r["operation"]: shown(r["operation"]) for r in rows})


def shown(operation: str) -> str:
    """A row's name on the page: an operation's spec by its human name (the spec is its tooltip)."""
    try:
        return human(operation)
    except ValueError:  # a named row ("exact cache vs recomputation (ch. 1)"), not a spec
        return operation


LABEL_WIDTH = 40  # characters of an operation's label per line on the guide's chart


@styled
def plot_decision_guide(rows: list[dict], model: str):
    """The decision guide, one panel per setting (the rows of a panel were measured alike): every
    operation's top-1 agreement with exact decoding and its 95 % interval over documents, coloured
    by verdict, the article's value marked, the cache size it leaves written right of the 100 % line."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    panels = {}
    for r in rows:
        panels.setdefault(r["setting"], []).append(r)
    lines = [max(textwrap.fill(shown(r["operation"]), LABEL_WIDTH).count("\n") + 1 for r in p)
             for p in panels.values()]
    heights = [len(p) * n + 1.2 for p, n in zip(panels.values(), lines)]  # a wrapped label gets its room
    height = 0.32 * sum(heights) + 2.6
    fig, axes = plt.subplots(len(panels), 1, figsize=(7.5, height), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, (name, group) in zip(axes[:, 0], panels.items()):
        _guide_panel(ax, group, name)
    axes[-1, 0].set_xlabel("top-1 agreement with exact decoding (%), 95 % interval over documents\n"
                           "label: cache size as % of the exact cache")
    fig.suptitle(f"Decision guide: top-1 agreement with exact decoding\nmodel: {model} (chapters 1, 4, 5)")
    handles = [Patch(color=v.colour, label=v.label) for v in VERDICTS]
    handles.append(plt.Line2D([], [], marker="D", color="black", linestyle="",
                              label=f"article ({ARTICLE_MODEL})"))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / height))  # room at the top for the two-line title
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=1)
    return fig


def _guide_panel(ax, rows: list[dict], name: str) -> None:
    y = list(range(len(rows)))
    ax.barh(y, [r["top1"] if r["top1"] is not None else 0 for r in rows],
            color=[r["verdict"].colour for r in rows])
    for i, r in enumerate(rows):  # a column right of the 100% line, clear of the bars and marks
        ax.text(102, i, f"cache {fmt(r['bytes_pct'], 3)}%", va="center", fontsize=9)
        if r["top1"] is None:  # compared in its cached state, not in decoded tokens: no bar
            ax.text(1, i, "K/V compared", va="center", fontsize=9)
        if r["top1_ci"]:
            lo, hi = max(0.0, r["top1_ci"][0]), min(100.0, r["top1_ci"][1])
            ax.plot([lo, hi], [i, i], color="black", linewidth=1.2, zorder=3)
    marked = [(i, r["article_top1"]) for i, r in enumerate(rows) if r["article_top1"] is not None]
    ax.scatter([v for _, v in marked], [i for i, _ in marked], marker="D", color="black", s=18, zorder=4)
    # the bars keep the width
    ax.set_yticks(y, [textwrap.fill(shown(r["operation"]), LABEL_WIDTH) for r in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, 140)
    ax.set_xticks(range(0, 101, 20))  # the space right of 100% holds the size labels, not a scale
    ax.axvline(100, color="grey", linewidth=0.6)
    ax.set_ylabel("operation")
    ax.set_title(textwrap.fill(name, 48))
