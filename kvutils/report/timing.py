"""Timings as the pages print them: every time with its repeats and spread (median, min–max), every
speed-up as the ratio of the medians with the range of its repeat pairs' own speed-ups, and a
published speed-up placed against that range (a single published number admits no test)."""
from __future__ import annotations

import statistics

from kvutils.core import compare
from kvutils.report.tables import PageTable, rows_table, verdict_text
from kvutils.report.text import fmt

ARTICLE_CONTEXT = 2000  # the context of the article's decode-step speed-up (e4_decode_time.ctx_2000)


def spread_text(values: list[float] | None, unit: str = "ms", digits: int = 3) -> str:
    """Repeated timings as a page prints them: 'median 12.3 ms, min–max 11.9–13 ms over 5 repeats';
    a result without its repeats (written before they were kept) says so."""
    if not values:
        return "repeats not recorded"
    stats = spread(list(values))
    if stats["n"] == 1:
        return f"{fmt(stats['median'], digits)} {unit}, one run (no spread)"
    return (f"median {fmt(stats['median'], digits)} {unit}, min–max {fmt(stats['min'], digits)}–"
            f"{fmt(stats['max'], digits)} {unit} over {stats['n']} repeats")


def speedup_text(step: dict) -> str:
    """A step's speed-up: the ratio of the medians, and the spread of the speed-ups of its repeat pairs."""
    pairs = step.get("speedups")
    head = f"{fmt(step['speedup'], 3)}× (ratio of the medians"
    if not pairs:
        return head + "; repeats not recorded)"
    if len(pairs) == 1:
        return head + "; one repeat, no spread)"
    return head + f"; per repeat pair {fmt(min(pairs), 3)}–{fmt(max(pairs), 3)}×, n = {len(pairs)})"


def against_published(step: dict, published: float, published_context: int, who: str) -> str:
    """Where one published speed-up lies against the range of our repeat pairs at the same context.
    A single number with no spread of its own admits no test, so the sentence places it and draws
    no verdict; at another context the two are not set against each other."""
    if step["context"] != published_context:
        return (f"{who}'s {fmt(published, 4)}× is at {published_context} tokens and ours at "
                f"{step['context']}, so the two are not set against each other")
    pairs = step.get("speedups")
    if not pairs:
        return f"{who}'s {fmt(published, 4)}× cannot be placed against a spread: this run kept no repeats"
    lo, hi = min(pairs), max(pairs)
    if len(pairs) == 1:
        side = "below" if published < lo else "above" if published > lo else "level with"
        where = f"{side} our one repeat's {fmt(lo, 3)}×"
    else:
        side = ("below every one" if published < lo else "above every one" if published > hi
                else "within the range")
        where = side + f" of our {len(pairs)} repeat pairs' speed-ups ({fmt(lo, 3)}–{fmt(hi, 3)}×)"
    return (f"{who}'s {fmt(published, 4)}× (one published figure, no spread given) lies {where}; a single "
            "published number admits no paired test, and the two machines differ")


def _median_range(median: float, values: list[float] | None, digits: int = 3) -> str:
    """'109 [108–110]': the median, and the min–max of its repeats where they were kept."""
    if not values or len(values) < 2:
        return fmt(median, digits)
    return f"{fmt(median, digits)} [{fmt(min(values), digits)}–{fmt(max(values), digits)}]"


def timing_table(decode: dict) -> PageTable:
    """Every timed step of every model, one row each: both sides' median with the min–max of the
    repeats, the speed-up with the range of the repeat pairs' own, the analytical ratio, the cached
    step against its bandwidth bound, and the speed-up against the next shorter context (an exact
    rank test over repeat pairs: not paired)."""
    rows = {}
    for model, r in decode.items():
        ordered = sorted(r["steps"], key=lambda s: s["context"])
        for shorter, s in zip([None, *ordered], ordered):
            n = len(s.get("speedups") or [])
            against = "—"
            if shorter is not None and n and shorter.get("speedups"):
                test = grew_test(shorter, s)
                against = f"{verdict_text(test)} (p = {test.p:.2g})"
            rows[f"{model}, {s['context']} tokens ({n} repeats)"] = {
                "cached step (ms)": _median_range(s["cached_ms"], s.get("cached_repeats_ms")),
                "uncached step (ms)": _median_range(s["uncached_ms"], s.get("uncached_repeats_ms"), 4),
                "speed-up (×)": _median_range(s["speedup"], s.get("speedups")),
                "analytical ratio (×)": fmt(s["analytical_ratio"], 4),
                "cached ÷ bandwidth bound": fmt(s["cached_ms"] / s["bound_ms"], 3),
                "speed-up against the shorter context": against,
            }
    return rows_table(rows, "model, context")


def speedup_grew(steps: list[dict]) -> bool | None:
    """Whether the speed-up grew with every longer context: with repeats, an exact rank test
    (`compare.ranked`) puts every longer context's repeat-pair speed-ups above the shorter's at
    p < 0.05; without, the medians' order. None where only one context was timed."""
    ordered = sorted(steps, key=lambda s: s["context"])
    if len(ordered) < 2:
        return None
    if all(s.get("speedups") for s in ordered):
        return all(grew_test(a, b).verdict == compare.A_HIGHER for a, b in zip(ordered, ordered[1:]))
    return all(a["speedup"] < b["speedup"] for a, b in zip(ordered, ordered[1:]))


def grew_test(shorter: dict, longer: dict) -> compare.Ranked:
    """The longer context's repeat-pair speed-ups against the shorter's (not paired: an exact rank test)."""
    return compare.ranked(longer["speedups"], shorter["speedups"], f"{longer['context']} tokens",
                          f"{shorter['context']} tokens")


def spread(values: list[float]) -> dict:
    """n, median, min and max of repeated timings."""
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values)}
