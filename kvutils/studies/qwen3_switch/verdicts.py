"""Chapter 5's verdicts, every one from `kvutils.core.compare` on the same held-out examples.

Accuracy counts an answer right when the right token's logit is above the wrong one's. A model that
prefers one answer token whatever the text (a base model reading an unfamiliar marker often does)
scores about 50 % on balanced classes and can look like a coin. Two measures it cannot fake:

* **balanced accuracy** — the mean of the accuracies on the examples of each label (equal to the
  accuracy when the labels are balanced, as in the `continuation` task);
* **AUC** of the label-0 log-odds (the logit of label 0's answer minus label 1's): the chance that
  an example of label 0 scores above one of label 1. A constant preference for one answer shifts
  every score alike and leaves the AUC where the ranking puts it.

Paired comparisons: right/wrong per example with McNemar's exact test (`compare.paired_binary`);
balanced accuracy as the mean of per-example values weighted by n / (2 × the examples of that
label); the AUC through each example's placement value (DeLong's structural components: for a
label-0 example the share of label-1 examples it outscores, and the reverse), weighted the same
way, so their mean is the AUC and two models' placements pair by example.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvutils.core import compare

UNIT = "held-out examples"


def _label_weights(labels: Sequence[int]) -> np.ndarray:
    """n / (2 n_label) per example: the mean of weighted values is the mean of the two labels' means."""
    y = np.asarray(labels)
    counts = {label: int((y == label).sum()) for label in (0, 1)}
    if not all(counts.values()):
        return np.full(y.shape, np.nan)
    return np.array([len(y) / (2 * counts[int(label)]) for label in y])


def balanced_values(right: Sequence[bool], labels: Sequence[int]) -> np.ndarray:
    """Per example, right × its label weight: their mean is the balanced accuracy (0..1)."""
    return np.asarray(right, dtype=float) * _label_weights(labels)


def balanced_accuracy(right: Sequence[bool], labels: Sequence[int]) -> float:
    return float(balanced_values(right, labels).mean())


def label0_scores(logodds: Sequence[float], labels: Sequence[int]) -> np.ndarray:
    """The label-0 answer's logit minus label 1's, from each example's right-minus-wrong log-odds."""
    x = np.asarray(logodds, dtype=float)
    return np.where(np.asarray(labels) == 0, x, -x)


def placements(logodds: Sequence[float], labels: Sequence[int]) -> np.ndarray:
    """Per example, its placement value × its label weight: their mean is the AUC."""
    s, y = label0_scores(logodds, labels), np.asarray(labels)
    pos, neg = s[y == 0], s[y == 1]
    if not len(pos) or not len(neg):
        return np.full(s.shape, np.nan)
    above = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])  # (pos, neg)
    value = np.empty_like(s)
    value[y == 0] = above.mean(1)
    value[y == 1] = above.mean(0)
    return value * _label_weights(labels)


def auc(logodds: Sequence[float], labels: Sequence[int]) -> float:
    return float(placements(logodds, labels).mean())


# --------------------------------------------------------------------------- paired comparisons


def accuracy_pair(a: dict, b: dict, a_name: str, b_name: str) -> compare.Paired:
    """Right/wrong on the same examples (McNemar); effect in accuracy (0..1)."""
    return compare.paired_binary(a["right_per_example"], b["right_per_example"], a_name, b_name, UNIT)


def auc_pair(a: dict, b: dict, labels: Sequence[int], a_name: str, b_name: str) -> compare.Paired:
    return compare.paired(placements(a["logodds_per_example"], labels),
                          placements(b["logodds_per_example"], labels), a_name, b_name, UNIT)


def auc_vs_chance(a: dict, labels: Sequence[int], name: str) -> compare.Paired:
    """The placements against one half each: the AUC against chance, paired over the examples."""
    values = placements(a["logodds_per_example"], labels)
    return compare.paired(values, 0.5 * _label_weights(labels), name, "chance", UNIT)


def knee(held: dict, ks: Sequence[int]) -> dict:
    """The knee from the test: the best tail by held-out accuracy, then the smallest k whose tail
    shows no detectable difference from it on the same examples (McNemar). `vs_best` keeps every
    comparison; `resolved` is False when even the smallest k is not separated from the best (the
    sweep then places no knee above its smallest k)."""
    tails = {k: held[f"tail{k}"]["tail_patch"] for k in ks}
    best = max(ks, key=lambda k: (tails[k]["accuracy_pct"], -k))
    vs_best = {k: accuracy_pair(tails[k], tails[best], f"k = {k}", f"k = {best}") for k in ks if k != best}
    level = [k for k in ks if k == best or not vs_best[k].separated]
    return {"knee_k": min(level), "best_k": best, "resolved": min(ks) != min(level) or min(ks) == best,
            "vs_best": {str(k): p.to_dict() for k, p in vs_best.items()}}


# --------------------------------------------------------------------------- the patching map


def cell_flips(pm: dict, row: int, col: int) -> list[int]:
    """Per pair where the clean adapter answers right, 1 if patching this cell flipped its answer."""
    out = []
    for clean, after, before in zip(pm["per_pair"]["clean"], pm["per_pair"]["patched"],
                                    pm["per_pair"]["unpatched"]):
        if clean > 0 and row < len(after):
            out.append(int((after[row][col] > 0) != (before[row][col] > 0)))
    return out


def where_it_reads(pm: dict) -> dict:
    """Among the layer groups of the 'whole continuation' row: the one that flips most answers, and
    whether McNemar's test puts it above every other group on the same pairs (`above`: the tests
    that do, `not_above`: those that do not)."""
    row = len(pm["row_labels"]) - 1
    groups = range(len(pm["col_labels"]) - 1)
    flips = {col: cell_flips(pm, row, col) for col in groups}
    n = len(flips[0]) if flips else 0
    top = max(groups, key=lambda c: (sum(flips[c]), -c))
    others = [compare.paired_binary(flips[top], flips[c], pm["col_labels"][top], pm["col_labels"][c], "pairs")
              for c in groups if c != top] if n else []
    above = [p for p in others if p.better(lower_is_better=False) == p.a]
    return {"top": top, "flipped": sum(flips[top]), "n": n,
            "above_every_other": bool(others) and len(above) == len(others),
            "above": above, "not_above": [p for p in others if p not in above],
            "closest": min(others, key=lambda p: p.effect, default=None)}


def control_pair(pm: dict) -> compare.Paired | None:
    """Per pair, the largest |change of log-odds| over the prefix cells: copied from another pair's
    context (bits that differ) against copied from the pair's own source (the same bits)."""
    foreign = pm.get("foreign_control")
    if not foreign:
        return None
    rows, cols = pm["control_rows"], len(pm["col_labels"])
    same = [max(abs(a[r][c] - b[r][c]) for r in range(rows) for c in range(cols))
            for a, b, f in zip(pm["per_pair"]["patched"], pm["per_pair"]["unpatched"],
                               pm["per_pair"]["foreign_patched"])
            if f is not None]
    return compare.paired(foreign["max_abs_delta_per_pair"], same, "another pair's prefix",
                          "the shared prefix",
                          "pairs")
