"""Chapter 4's follow-up questions on the page: keys retrieved on turn 1 against the follow-ups asked
through the same compressed cache, per method, and the paired verdicts
(`kvutils.studies.cache_approximations.followups`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from kvutils.core import compare
from kvutils.report.figures import placeholder, styled
from kvutils.report.names import human_label
from kvutils.report.tables import page_table

REGIME_TITLE = {"agnostic": "compressed before the first question (prompt cache)",
                "aware": "compressed with the first question"}
WORDS = {compare.A_LOWER: "loses follow-ups", compare.A_HIGHER: "follow-ups better than turn 1",
         compare.IDENTICAL: "same as turn 1 on every prompt"}  # right or wrong alike: 0 % twice is no keeping


def _gated(hay: dict) -> set[str]:
    return {c for c, ok in hay.get("gate_followups", {}).items() if ok and hay["gate"].get(c)}


def counts(retrieval_numbers: dict, regime: str = "agnostic") -> dict:
    """{model: {label: {"turn1": (right, n), "followup": (right, n), "exact": (right, n),
    "construction": lost follow-ups}}} over every haystack with follow-ups, gated prompts only."""
    out: dict = {}
    for model, per_hay in retrieval_numbers.items():
        for hay in per_hay.values():
            if not isinstance(hay, dict) or "followups" not in hay.get("exact", {}):
                continue
            gated, contexts = _gated(hay), [str(p["context"]) for p in hay["prompts"]]
            exact = hay["exact"]["followups"]["per_prompt"]
            for label, entry in hay["ops"].items():
                r = entry[regime]
                if "followups" not in r:
                    continue
                keep = [j for j, i in enumerate(r["prompts"]) if contexts[i] in gated]
                row = out.setdefault(model, {}).setdefault(
                    label, {"turn1": [0, 0], "followup": [0, 0], "exact": [0, 0], "construction": 0,
                            "not_scored": r["followups"].get("not_scored")})
                if row["not_scored"]:
                    row["turn1"][0] += sum(r["per_prompt"][j]["correct"] for j in keep)
                    row["turn1"][1] += len(keep)
                    continue
                for j in keep:
                    row["turn1"][0] += r["per_prompt"][j]["correct"]
                    row["turn1"][1] += 1
                    pairs = (("followup", r["followups"]["per_prompt"][j]), ("exact", exact[r["prompts"][j]]))
                    for key, records in pairs:
                        row[key][0] += sum(x["correct"] for x in records)
                        row[key][1] += len(records)
                lost = {tuple(q) for q in r["followups"]["construction_losses"]["questions"]}
                row["construction"] += sum(1 for j, _ in lost if j in set(keep))
    return out


def exact_followups(retrieval_numbers: dict) -> tuple[str, ...]:
    """Per model and haystack with follow-ups, the exact cache's own turn 1 and follow-ups (the gate)."""
    out = []
    for model, per_hay in retrieval_numbers.items():
        for name, hay in per_hay.items():
            if not isinstance(hay, dict) or "followups" not in hay.get("exact", {}):
                continue
            turn1 = hay["exact"]["per_prompt"]
            later = [r for rs in hay["exact"]["followups"]["per_prompt"] for r in rs]
            passed = [c for c, ok in hay.get("gate_followups", {}).items() if ok]
            out.append(f"{model}, {name}: the exact cache answered turn 1 on "
                       f"{sum(r['correct'] for r in turn1)} of {len(turn1)} prompts and "
                       f"{sum(r['correct'] for r in later)} of {len(later)} follow-ups; contexts passing the "
                       f"gate on follow-ups: {', '.join(passed) or 'none'}.")
    return tuple(out)


def _pct(right: int, n: int) -> str:
    return f"{100 * right / n:.0f} %" if n else "–"


SERIES = (("agnostic", "turn1", "o", "tab:blue", "turn 1, prompt cache"),
          ("agnostic", "followup", "s", "tab:orange", "follow-ups, prompt cache"),
          ("aware", "followup", "^", "tab:green", "follow-ups, compressed with turn 1's question"))


@styled
def plot_followups(retrieval_numbers: dict):
    """Keys retrieved (% of questions, 95 % Clopper–Pearson intervals) per method: turn 1 and the
    follow-ups through the prompt cache, and the follow-ups through the cache compressed with turn 1's
    question; one panel per model, the exact cache's follow-ups as a dashed line."""
    import matplotlib.pyplot as plt

    per_regime = {regime: counts(retrieval_numbers, regime) for regime in REGIME_TITLE}
    models = list(per_regime["agnostic"])
    if not models:
        return placeholder("Follow-up questions", "no haystack with follow-ups passed the exact cache's gate")
    names = list(dict.fromkeys(lab for m in models for lab in per_regime["agnostic"][m]))
    y = np.arange(len(names))
    fig, axes = plt.subplots(1, len(models), figsize=(7.5, 1.6 + 0.3 * len(names)), squeeze=False,
                             sharey=True)
    for ax, model in zip(axes[0], models):
        for (regime, key, marker, colour, text), offset in zip(SERIES, (-0.25, 0.0, 0.25)):
            rows = per_regime[regime].get(model, {})
            rates = [tuple(rows[lab][key]) if lab in rows else (0, 0) for lab in names]
            mid = np.array([100 * r / n if n else np.nan for r, n in rates])
            ci = [compare.proportion_interval(r, n) if n else (np.nan, np.nan) for r, n in rates]
            err = [[m - 100 * lo for m, (lo, _) in zip(mid, ci)], [100 * hi - m for m, (_, hi) in zip(mid,
                                                                                                      ci)]]
            ax.errorbar(mid, y + offset, xerr=err, fmt=marker, color=colour, label=text, capsize=2, ms=4,
                        elinewidth=0.8)
        exact = next(iter(per_regime["agnostic"][model].values()))["exact"]
        if exact[1]:
            ax.axvline(100 * exact[0] / exact[1], color="grey", ls="--", lw=1,
                       label="exact cache, follow-ups")
        ax.set_xlim(-3, 103)
        ax.set_title(model)
    axes[0, 0].set_yticks(y, [human_label(lab) for lab in names])
    axes[0, 0].invert_yaxis()
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.supxlabel("keys retrieved (% of questions)", y=0.42 / (1.6 + 0.3 * len(names)), va="bottom")
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8, frameon=False)
    fig.suptitle("Follow-up questions through one compressed cache (95 % intervals)")
    fig.tight_layout(rect=(0, 0.62 / (1.6 + 0.3 * len(names)), 1, 1))
    return fig


EFFECT = "follow-ups − turn 1 (points, 95 % interval; sign test p)"


def _effect(v: dict | None) -> str:
    """The paired effect the verdict is drawn from: the mean over prompts of (share of follow-ups
    right − turn 1 right), in points, its bootstrap interval and the sign test's p (McNemar's exact
    test where a prompt has one follow-up). The verdict separates where both do."""
    if v is None:
        return "–"
    ci = v.get("ci95")
    interval = f" [{100 * ci[0]:+.0f}, {100 * ci[1]:+.0f}]" if ci else ""
    return f"{100 * v['effect']:+.0f}{interval}; p = {v['p']:.2g}".replace("-", "−")


def _verdict(v: dict | None, lost: int, questions: int) -> str:
    if v is None:
        return "not judged"
    if v["verdict"] in WORDS:
        word = WORDS[v["verdict"]]
    elif v["verdict"] == compare.CANNOT:
        word = f"cannot separate at n = {v['n']}"
    else:  # the sign test did not separate: no claim either way
        word = f"no detectable difference at n = {v['n']}"
    return f"{word}; {lost} of {questions} lost by construction" if lost else word


def followup_table(retrieval_numbers: dict, regime: str = "agnostic") -> pd.DataFrame:
    """(rows: method) turn 1 | follow-up | exact | effect | verdict (follow-ups against turn 1 on the same
    cache,
    paired over prompts; n in the header), one row per model and method, in `regime`."""
    rows, ns = [], set()
    for model, per_model in counts(retrieval_numbers, regime).items():
        found = {v["a"].removesuffix(" follow-ups"): v for hay in retrieval_numbers[model].values()
                 if isinstance(hay, dict) for v in hay.get("followup_verdicts", [])
                 if v["against"] == "turn1" and v["regime"] == regime and v["metric"] == "correct"}
        for label, c in per_model.items():
            v = found.get(label)
            if v:
                ns.add(v["n"])
            rows.append({"model": model, "method": human_label(label), "turn 1": _pct(*c["turn1"]),
                         "follow-up": _pct(*c["followup"]), "exact": _pct(*c["exact"]), EFFECT: _effect(v),
                         "verdict": c["not_scored"] or _verdict(v, c["construction"], c["followup"][1])})
    header = f"follow-ups vs turn 1 (McNemar-type sign test, n = {' / '.join(map(str, sorted(ns)))} prompts)"
    table = pd.DataFrame(rows, columns=["method", "turn 1", "follow-up", "exact", EFFECT, "verdict", "model"])
    table = table.rename(columns={"verdict": header}).set_index("method")
    return page_table(table if table["model"].nunique() > 1 else table.drop(columns="model"))
