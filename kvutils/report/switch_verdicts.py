"""Chapter 5's comparative sentences that a table cannot hold, each computed from a paired test of
`kvutils.core.compare` on the same held-out examples (see `kvutils.studies.qwen3_switch.verdicts`): the
knee, and the patching map with its two controls (the per-example tests as a table:
`kvutils.report.switch_evidence`). Every function takes one model's results (`numbers[model]`) and
returns a clause."""
from __future__ import annotations

from kvutils.core import compare
from kvutils.report.text import fmt
from kvutils.studies.qwen3_switch import verdicts as sv


def _pct(x: float) -> str:
    return f"{fmt(100 * x, 3)}%"


def _where(p: compare.Paired, points: bool) -> str:
    """'n = 128 held-out examples, difference +3.1 points, 95 % interval [−2.3, +8.6], p = 0.41'
    (an effect in 0..1 given in points when `points`)."""
    scale, unit = (100, " points") if points else (1, "")
    if p.ci95 is None:
        interval = f"no interval at n = {p.n}"
    else:
        interval = f"95 % interval [{_signed(scale * p.ci95[0])}, {_signed(scale * p.ci95[1])}]"
    return f"n = {p.n} {p.unit}, difference {_signed(scale * p.effect)}{unit}, {interval}, p = {p.p:.2g}"


def _signed(x: float) -> str:
    return f"{x:+.3g}".replace("-", "−")


def verdict(p: compare.Paired, metric: str, points: bool = True) -> str:
    """One clause: 'A is above B in <metric>' only when the test separates them."""
    if p.verdict == compare.IDENTICAL:
        return f"{p.a} and {p.b} give the same {metric or 'value'} on every one of the {p.n} {p.unit}"
    what = f" in {metric}" if metric else ""
    rule = f"; {p.withheld()}" if p.withheld() else ""
    if p.verdict == compare.CANNOT:
        return f"no verdict possible{what} between {p.a} and {p.b} at this n ({_where(p, points)}{rule})"
    if not p.separated:
        return f"no detectable difference{what} between {p.a} and {p.b} ({_where(p, points)}{rule})"
    side = "above" if p.verdict == compare.A_HIGHER else "below"
    return f"{p.a} is {side} {p.b}{what} ({_where(p, points)})"


def knee(model: str, r: dict) -> str:
    """The knee from the paired test (see `switch_verdicts.knee`)."""
    k = r["knee"]
    best, ks, held = k["best_k"], r["k_values"], r["switch"]["heldout"]
    acc = {x: held[f"tail{x}"]["tail_patch"]["accuracy_pct"] for x in ks}
    rest = [compare.Paired.from_dict(d) for d in k["vs_best"].values()]
    tests = "; ".join(verdict(p, "accuracy") for p in rest) or "no other k was trained"
    top = f"the highest-scoring tail, k = {best} ({fmt(acc[best], 3)}%)"
    if len(ks) == 1:
        head = f"not located: one k was trained (k = {best}, {fmt(acc[best], 3)}%)"
    elif k["knee_k"] == best == min(ks):
        head = f"k = {best} ({fmt(acc[best], 3)}%), the smallest k trained and {top.split(', k =')[0]}"
    elif k["knee_k"] == best:
        head = f"k = {best}: {top}, and every smaller k is detectably below it"
        deeper = [x for x, d in k["vs_best"].items() if int(x) > best and d["verdict"] == compare.A_LOWER]
        if deeper:  # the curve falls again past the best k: depth alone does not order the tails here
            these = " and ".join(f"k = {x}" for x in deeper) + (" is" if len(deeper) == 1 else " are")
            head += (f"; the deeper {these} detectably below it too, so accuracy does not rise with depth in "
                     "this run (the training losses below show whether each tail learned)")
        if best == max(ks):  # the curve still rises at its end: the sweep bounds the knee from below
            head += (f"; k = {best} is also the deepest tail trained, so quality had not levelled off within "
                     f"the sweep and the knee lies at k = {best} or deeper")
    elif not k["resolved"]:
        n = rest[0].n if rest else 0
        head = (f"not located at n = {n} held-out examples: no smaller k is detectably below {top} (the "
                f"smallest, k = {k['knee_k']}, scores {fmt(acc[k['knee_k']], 3)}%), so the sweep cannot say "
                "where quality starts to fall: at the smallest k trained or below it, or at a depth the test "
                "has too few examples to see")
    else:
        head = (f"k = {k['knee_k']} ({fmt(acc[k['knee_k']], 3)}%): the smallest k with no detectable "
                f"difference from {top}")
    return f"{model}: {head} (of L = {r['layers']}; {tests})"


# --------------------------------------------------------------------------- the patching map


def _flip_rate(k: int, n: int) -> str:
    """'3 of 12 (25%, 95% interval 5.5–57%)' (n > 0)."""
    lo, hi = compare.proportion_interval(k, n)
    return f"{k} of {n} ({fmt(100 * k / n, 3)}%, 95% interval {fmt(100 * lo, 3)}–{fmt(100 * hi, 3)}%)"


def patching(model: str, r: dict, adapter_label: str) -> str:
    pm = r["patching"]
    whole = sv.cell_flips(pm, len(pm["row_labels"]) - 1, len(pm["col_labels"]) - 1)
    head = (f"{model} ({adapter_label}, {pm['n_contexts']} pairs; the clean adapter answers right on "
            f"{pm['n_clean_right']} of them, the n of every cell's flips)")
    adapter = r["switch"]["heldout"][f"tail{pm['k']}"]["tail_patch"]
    learned = sv.accuracy_pair(adapter, r["switch"]["heldout"]["base"]["zero_shot"], adapter_label,
                               "the base model")
    # a map of an adapter that does no better than the base reads nothing learned
    if learned.verdict != compare.A_HIGHER:
        head += (f"; the patched adapter is not detectably more accurate than the base model on the held-out "
                 f"examples ({fmt(adapter['accuracy_pct'], 3)}% against "
                 f"{fmt(r['switch']['heldout']['base']['zero_shot']['accuracy_pct'], 3)}%, n = {learned.n}), "
                 "so this map shows where an adapter that did not learn the task reads, not where the task "
                 "is read")
    if not whole:
        return (head + ": with no right answer to turn wrong, the map counts no flips; only its log-odds "
                       "changes remain")
    return (head + f": copying all of what follows the shared prefix, in all layers, flips "
            f"{_flip_rate(sum(whole), len(whole))} right answers")


def where(model: str, r: dict) -> str:
    pm = r["patching"]
    w = sv.where_it_reads(pm)
    layers = pm["col_labels"][w["top"]]
    span = f"the adapter of this map is on layers {r['layers'] - pm['k'] + 1}–{r['layers']}"
    if w["n"] == 0:
        return f"{model}: no pair the clean adapter answers right, so no flip to place; {span}"
    if w["flipped"] == 0:
        return (f"{model}: copying all of what follows, in any one group of layers, flips none of {w['n']} "
                f"right answers; {span}")
    if w["above_every_other"]:
        return (f"{model}: copying all of what follows in layers {layers} flips "
                f"{_flip_rate(w['flipped'], w['n'])} right answers, detectably more than in any other group "
                f"of layers (closest: {verdict(w['closest'], 'flips')}); {span}")
    separated = ", ".join(
        f"layers {p.b} ({_signed(100 * p.effect)} points, p = {p.p:.2g})" for p in w["above"])
    level = ", ".join(f"layers {p.b} ({_where(p, True)})" for p in w["not_above"])
    return (f"{model}: copying all of what follows in layers {layers} flips the most right answers, "
            f"{_flip_rate(w['flipped'], w['n'])}; the tests on the same {w['n']} pairs put it above "
            + (f"{separated}, but not above {level}" if separated else f"none of the other groups ({level})")
            + f", so no one group of layers stands out; {span}")


def controls(model: str, r: dict) -> str:
    """The shared prefix (chapter 1's theorem: equal bits, so nothing can move) beside the same
    cells copied from another pair's context, which can fail."""
    pm = r["patching"]
    theorem = (f"{model}: shared prefix — entries of the two passes differ by "
               f"{fmt(pm['prefix_kv_max_diff'], 3)}, the answer's log-odds move by at most "
               f"{fmt(pm['control_max_abs_delta'], 3)}: chapter 1's theorem re-checked, a zero that holds by "
               "construction, not a measured null")
    p = sv.control_pair(pm)
    if p is None:
        return theorem + "; no pair has a context of another prefix, so the control that can fail was not run"
    f = pm["foreign_control"]
    flips = (f"flips {_flip_rate(f['flipped_any'], f['n_clean_right'])} right answers in at least one cell"
             if f["n_clean_right"] else "has no right answer to flip")
    return (theorem + f". Another pair's prefix copied into the same cells moves the log-odds by up to "
            f"{fmt(max(f['max_abs_delta_per_pair']), 3)} and {flips}; per pair, largest |change| against the "
            "shared prefix's: "
            + verdict(p, "largest |change of log-odds|", points=False))
