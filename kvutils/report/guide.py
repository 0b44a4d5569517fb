"""The conclusions' decision guide: every cache operation the chapters scored on one model, sorted
by fixed thresholds into exact, near-exact and costly (a table and a figure), what the guide covers,
and how many of chapter 4's frontier comparisons its paired tests separated."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.checks import check_number
from kvutils.core.compare import IDENTICAL, Paired
from kvutils.report.cache_approximations import article_rows_by_spec
from kvutils.report.common import fmt, styled

ARTICLE_MODEL = "Pythia-160M"
# |logit difference| below which fp64 decoding counts as equal up to rounding (the theorem's test)
FP64_TOLERANCE = 1e-9


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
NEAR = Verdict("near-exact", "near-exact here: confirm on your model", "#e9c46a")
COSTLY = Verdict("costly", "costs quality: measure before buying", "#e76f51")


def decision_rows(runs: dict, near_exact_pct: float = 99.0) -> list[dict]:
    """One row per cache operation, for the first Table-2 model: verdict, our top-1 agreement and KL,
    the article's top-1, cache bytes relative to the exact cache, and how it is checked."""
    check_number("near_exact_pct", near_exact_pct, 0, 100, low_inclusive=False)
    ch1, ch4, ch5 = chapter_numbers(runs, "01"), chapter_numbers(runs, "04"), chapter_numbers(runs, "05")
    model, run = next(iter(ch4["table2"].items()))
    art = article_rows_by_spec()
    rows = []
    decode = [r[d]["decode"] for r in ch1.values() for d in r]
    top1 = min(d["argmax_agreement_pct"] for d in decode)
    # the theorem is judged in fp64, where rounding is far below the tolerance; fp32 alone cannot separate the two
    fp64_decode = [r["float64"]["decode"] for r in ch1.values() if "float64" in r]
    exact_decode = bool(fp64_decode) and all(
        d["max_logit_diff"] <= FP64_TOLERANCE and d["identical"] == d["n_prompts"] for d in fp64_decode)
    rows.append(dict(operation="exact cache vs recomputation (ch. 1)",
                     verdict=EXACT if exact_decode else NEAR if top1 >= near_exact_pct else COSTLY,
                     top1=top1, kl=None, article_top1=100.0, bytes_pct=100.0,
                     check="theorem; tested on every architecture"))
    fp64 = [r["float64"]["prefixes"] for r in ch1.values() if "float64" in r]
    exact_prefix = (all(p["max_diff_across_continuations"] <= FP64_TOLERANCE for p in fp64) if fp64 else
                    all(r[d]["prefixes"]["bit_identical"] == r[d]["prefixes"]["n_prefixes"] for r in ch1.values() for d in r))
    rows.append(dict(operation="prefix reuse across continuations (ch. 1)", verdict=EXACT if exact_prefix else NEAR,
                     top1=100.0, kl=None, article_top1=None, bytes_pct=100.0,
                     check="theorem; tested on every architecture"))
    for m, r in ch5.items():
        k = max(r["k_values"])
        for policy, name in (("tail_patch", "LoRA switch, tail patch"), ("stale", "LoRA switch, stale cache")):
            s = r["switch"]["scores"][f"tail{k}"][policy]
            verdict = EXACT if s["max_abs_logit_diff"] <= FP64_TOLERANCE else (
                NEAR if s["top1_agree_pct"] >= near_exact_pct else COSTLY)
            rows.append(dict(operation=f"{name} (ch. 5, {m}, k = {k})", verdict=verdict, top1=s["top1_agree_pct"],
                             kl=s["kl_mean"], article_top1=None, bytes_pct=100.0,
                             check="theorem (tail patch); chapter 5" if policy == "tail_patch" else "chapter 5"))
    exact_bytes = run["plain"]["exact_cache_bytes"] if run["plain"] else None
    for spec, o in chapter4_ops(run).items():
        if o["name"] == "exact":
            continue
        bytes_pct = 100.0 * o["cache_bytes"] / exact_bytes if exact_bytes and o["name"] not in (
            "chunk_reuse", "chunk_blend") else 100.0
        rows.append(_op_row(spec, o, near_exact_pct, art, bytes_pct, "acceptance test (kvutils.cache.accept), Table 2"))
    front = ch4.get("frontier", {}).get(model)
    for spec, o in _frontier_only(run, front).items():
        rows.append(_op_row(spec, o, near_exact_pct, art, 100.0 * o["cache_bytes"] / front["exact_cache_bytes"],
                            f"acceptance test, the frontier's {_count(len(front['documents']), 'document')}"))
    return rows


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def _op_row(spec: str, o: dict, near_exact_pct: float, art: dict, bytes_pct: float, check: str) -> dict:
    verdict = EXACT if o["mean_kl"] == 0 else (NEAR if o["top1_agreement_pct"] >= near_exact_pct else COSTLY)
    return dict(operation=spec, verdict=verdict, top1=o["top1_agreement_pct"], kl=o["mean_kl"],
                article_top1=art[spec]["top1_pct"] if spec in art else None, bytes_pct=bytes_pct, check=check)


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
    text = (f"The guide sorts {len(rows)} operations: chapter 1's {ch1_rows} properties of the exact cache (over every "
            f"chapter-1 model), chapter 5's LoRA switch ({switch} rows, {', '.join(ch5) or 'none'}), and on {model} "
            f"chapter 4's {len(table2)} Table-2 operations")
    if front:
        text += (f" and the {len(extra)} methods of chapter 4's frontier that Table 2 does not score (presses, "
                 f"decode-time policies, quantised caches; on the frontier's {_count(len(front['documents']), 'document')})")
        refused = sorted(front.get("refused", {}))
        if refused:
            text += f". Left out: {', '.join(refused)}, which {model} refused"
    else:
        text += (f". The frontier's methods are not in it: the frontier was not run on {model}"
                 + (f" (it ran on {', '.join(ch4.get('frontier', {}))})" if ch4.get("frontier") else ""))
    others = [m for m in ch4["table2"] if m != model]
    if others:
        text += f". Chapter 4's rows for {', '.join(others)} are in chapter 4, not in the guide"
    return text


def frontier_verdicts(ch4: dict) -> str:
    """How many of the frontier's pairwise comparisons (kvutils.core.compare, paired over its documents)
    separated two methods, per model; the guide's verdict colours are thresholds, not these tests."""
    parts = []
    for m, run in ch4.get("frontier", {}).items():
        tests = [Paired.from_dict({"p": math.nan, **v}) for v in run.get("verdicts") or []]
        if not tests:
            continue
        sizes = sorted({t.n for t in tests})
        parts.append(f"{m}: {sum(t.separated for t in tests)} of {len(tests)} pairs of methods separated in mean KL at "
                     f"n = {'/'.join(str(n) for n in sizes)} documents, {sum(t.verdict == IDENTICAL for t in tests)} "
                     "identical (ties by construction, named in chapter 4), the rest no detectable difference")
    if not parts:
        return ("Chapter 4's frontier recorded no paired comparisons in this run, so the guide ranks none of its methods "
                "against another")
    return ("Which of chapter 4's methods beats which is decided there, by paired tests over documents ("
            + "; ".join(parts) + "); the guide's colours are fixed thresholds on one model, not those tests")


def decision_table(rows: list[dict]) -> pd.DataFrame:
    table = pd.DataFrame([{
        "operation": r["operation"], "verdict": r["verdict"].name, "top-1 agreement (%)": fmt(r["top1"], 4),
        f"article (%), {ARTICLE_MODEL}": fmt(r["article_top1"]) if r["article_top1"] is not None else "—",
        "mean KL (nats)": fmt(r["kl"], 3) if r["kl"] is not None else "—",
        "cache size vs exact (%)": fmt(r["bytes_pct"], 3), "checked by": r["check"]} for r in rows])
    return table.set_index("operation")


@styled
def plot_decision_guide(rows: list[dict], model: str):
    """The decision guide: every operation's top-1 agreement with exact decoding, coloured by
    verdict, the article's value marked, the cache size it leaves written at the bar's end."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(7.5, 0.32 * len(rows) + 2.8))
    y = range(len(rows))
    ax.barh(list(y), [r["top1"] for r in rows], color=[r["verdict"].colour for r in rows])
    for i, r in enumerate(rows):  # a column right of the 100% line, clear of the bars and marks
        ax.text(102, i, f"cache {fmt(r['bytes_pct'], 3)}%", va="center", fontsize=9)
    marked = [(i, r["article_top1"]) for i, r in enumerate(rows) if r["article_top1"] is not None]
    ax.scatter([v for _, v in marked], [i for i, _ in marked], marker="D", color="black", s=18, zorder=3)
    ax.set_yticks(list(y), [r["operation"] for r in rows])
    ax.invert_yaxis()
    ax.set_xlim(0, 130)
    ax.set_xticks(range(0, 101, 20))  # the space right of 100% holds the size labels, not a scale
    ax.axvline(100, color="grey", linewidth=0.6)
    ax.set_xlabel("top-1 agreement with exact decoding (%)\nlabel: cache size as % of the exact cache")
    ax.set_ylabel("cache operation")
    ax.set_title(f"Decision guide: which cache operations are free\nmodel: {model} (chapters 1, 4, 5)")
    handles = [Patch(color=v.colour, label=v.label) for v in (EXACT, NEAR, COSTLY)]
    handles.append(plt.Line2D([], [], marker="D", color="black", linestyle="", label=f"article ({ARTICLE_MODEL})"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.3, -0.12), ncol=1)
    fig.tight_layout()
    return fig
