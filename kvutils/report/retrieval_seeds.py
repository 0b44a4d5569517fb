"""Random eviction over its seeds on chapter 4's retrieval test: each seed's keys retrieved, their
mean and range, per model, haystack, level and regime (`retrieval.fold_seeds` in the study). The
paired tests and the figures read the first seed; this says how far another seed moves it."""
from __future__ import annotations

from kvutils.report.retrieval import REGIME_WORDS, haystacks, short
from kvutils.report.text import fmt


def _and(items) -> str:
    """"7, 9 and 8"."""
    words = [fmt(i) for i in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def seeds_clause(label: str, regime: str, seeds: dict) -> str:
    """"random (evicts 25 %), question after compression: 7, 9 and 8 of 24 keys with seeds 0, 1 and
    2 (mean 33 %, range 29-38 %)"."""
    lo, hi = seeds["accuracy_range"]
    return (f"{short(label)}, {REGIME_WORDS[regime]}: {_and(seeds['correct'])} of {seeds['n']} keys with "
            f"seeds {_and(seeds['seed'])} (mean {100 * seeds['mean_accuracy']:.0f} %, range "
            f"{100 * lo:.0f}–{100 * hi:.0f} %)")


def seeds_findings(retrieval: dict) -> str:
    """Every model and haystack's random rows over their seeds, or why there are none."""
    parts = []
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            clauses = [seeds_clause(label, regime, entry[regime]["seeds"])
                       for label, entry in r["ops"].items() for regime in REGIME_WORDS
                       if entry[regime].get("seeds")]
            if clauses:
                parts.append(f"{model} on {hay}: " + "; ".join(clauses))
    if not parts:
        return "random eviction was scored with one seed only (or the retrieval test was not run)."
    return ". ".join(parts) + ". The paired tests and the figures use the first seed."
