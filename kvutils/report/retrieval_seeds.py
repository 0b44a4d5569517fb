"""Random eviction over its seeds on chapter 4's retrieval test: each seed's keys retrieved, their
mean and range, per model, haystack, level and regime (`retrieval.fold_seeds` in the study). The
paired tests and the figures read the first seed; this says how far another seed moves it."""
from __future__ import annotations

from kvutils.report.retrieval import REGIME_WORDS, haystacks, short
from kvutils.report.tables import PageTable, rows_table


def seeds_table(retrieval: dict) -> PageTable | None:
    """Every model and haystack's random rows over their seeds (None where one seed was scored)."""
    rows = {}
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            for label, entry in r["ops"].items():
                for regime, words in REGIME_WORDS.items():
                    seeds = entry[regime].get("seeds")
                    if seeds:
                        lo, hi = seeds["accuracy_range"]
                        rows[f"{model}, {hay}: {short(label)}, {words}"] = {
                            "keys retrieved, seed by seed": ", ".join(
                                f"{c} (seed {s})" for c, s in zip(seeds["correct"], seeds["seed"])),
                            "prompts": str(seeds["n"]),
                            "mean [range] (%)":
                                f"{100 * seeds['mean_accuracy']:.0f} [{100 * lo:.0f}–{100 * hi:.0f}]"}
    return rows_table(rows, "model, haystack: method, regime") if rows else None
