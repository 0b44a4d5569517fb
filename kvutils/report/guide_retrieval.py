"""The decision guide's second axis: long-range retrieval (chapter 4) beside the KL and top-1 axis.

For a guide row's cache operation, on the guide's model, per haystack whose exact cache passed the
gate and per regime: keys retrieved, n, and the two paired verdicts against the exact cache that
chapter 4 computed (McNemar on right/wrong, the paired bootstrap on the key's log-probability), and
the prompts on which the operation's cache held none of the needle's entries (a loss by
construction). An operation is free only where both axes say so: a retrieval loss (chapter 4's
rule: fewer keys by McNemar, or the key's log-probability down by more than the margin) makes a
near-exact row costly.
"""
from __future__ import annotations

from kvutils.cache.registry import parse_op
from kvutils.core import compare
from kvutils.report.chapter4_verdicts import LOSES, retrieval_verdict
from kvutils.report.retrieval import haystacks, short
from kvutils.studies.cache_approximations.retrieval import frontier_label

REGIME_SHORT = {"aware": "with the question", "agnostic": "before the question"}


def _canonical(spec: str) -> str | None:
    try:
        return parse_op(spec).spec
    except ValueError:  # a named guide row ("exact cache vs recomputation (ch. 1)"), not a spec
        return None


def label_for(result: dict, spec: str, level: float | None = None) -> str | None:
    """The retrieval label ("snapkv@0.25", or a precision spec) whose operation is `spec` at some
    context, else, for a frontier operation matched to press level `level` (a window or decode-time
    policy, whose budget the two tests match at their own lengths), the label at that level; None
    where retrieval did not run it."""
    wanted = _canonical(spec)
    if wanted is None:
        return None
    for label, entry in result["ops"].items():
        if wanted in {_canonical(s) for s in entry.get("specs", {}).values()} or _canonical(label) == wanted:
            return label
    matched = frontier_label(wanted, level) if level is not None else None
    return matched if matched in result["ops"] else None


def retrieval_axis(retrieval: dict, model: str, spec: str, level: float | None = None) -> dict | None:
    """{haystack: {regime: {correct, n, accuracy_pct, mcnemar, key_logprob, construction_losses,
    construction_wrong, lost}}} for `spec` on `model` (matched to press level `level` on the
    frontier, if any), over the gated prompts; None where retrieval did not run the operation on
    that model (or no haystack passed the gate)."""
    return _axis(retrieval, model, lambda r: label_for(r, spec, level))


def _axis(retrieval: dict, model: str, label_in) -> dict | None:
    """`retrieval_axis` for the label `label_in(haystack result)` names in each gated haystack."""
    out = {}
    for hay, r in haystacks(retrieval.get(model) or {}).items():
        if not any(r.get("gate", {}).values()):
            continue
        label = label_in(r)
        if label is None:
            continue
        out[hay] = {}
        for regime in REGIME_SHORT:
            records = r["ops"][label][regime]["per_prompt"]
            tests = {v["metric"]: compare.Paired.from_dict(v) for v in r["verdicts"]
                     if v["a"] == label and v["against"] == "exact" and v["regime"] == regime}
            built = r["ops"][label][regime].get("construction_losses") or {"prompts": [], "correct": 0}
            wrong = len(built["prompts"]) - built["correct"]
            correct, logprob = tests.get("correct"), tests.get("key_logprob")
            # chapter 4's rule, so the guide and the page agree: fewer keys (McNemar), or the key's
            # log-probability below the exact cache's by more than the margin (`chapter4_verdicts`)
            verdict = retrieval_verdict(
                [r["exact"]["per_prompt"][i] for i in r["ops"][label][regime]["prompts"]],
                                        records, built=len(built["prompts"]))
            lost = verdict.mark.split()[0] == LOSES
            out[hay][regime] = {"correct": sum(bool(x["correct"]) for x in records), "n": len(records),
                                "accuracy_pct": 100 * sum(bool(x["correct"]) for x in records) / len(records),
                                "mcnemar": correct.verdict if correct else None,
                                "key_logprob": logprob.verdict if logprob else None,
                                "construction_losses": len(built["prompts"]), "construction_wrong": wrong,
                                "verdict": verdict.words, "lost": lost, "followup": _followup(r, label,
                                                                                              regime)}
    return out or None


def _followup(result: dict, label: str, regime: str) -> dict | None:
    """The follow-up questions asked through the same cache (issue 51): keys retrieved over the prompts
    that pass both gates, and the paired verdict against the exact cache's own follow-ups; None where
    the haystack had no follow-ups (one question per prompt) or no prompt passed both gates."""
    tests = {v["against"]: v for v in result.get("followup_verdicts", [])
             if v["a"] == f"{label} follow-ups" and v["regime"] == regime and v["metric"] == "correct"}
    if "exact" not in tests:
        return None
    gated = {c for c, ok in result.get("gate_followups", {}).items() if ok and result["gate"].get(c)}
    contexts = [str(p["context"]) for p in result["prompts"]]
    entry = result["ops"][label][regime]
    records = [x for j, i in enumerate(entry["prompts"]) if contexts[i] in gated
               for x in entry["followups"]["per_prompt"][j]]
    right = sum(bool(x["correct"]) for x in records)
    return {"correct": right, "n": len(records), "accuracy_pct": 100 * right / len(records),
            "against_exact": tests["exact"]["verdict"],
            "against_turn1": tests["turn1"]["verdict"] if "turn1" in tests else None}


def loses_keys(axis: dict | None) -> list[str]:
    """Where the operation loses retrieval: "pydoc, before the question", … (empty: nowhere detected)."""
    return [f"{hay}, {REGIME_SHORT[regime]}" for hay, regimes in (axis or {}).items()
            for regime, v in regimes.items() if v["lost"]]


def axis_text(axis: dict | None) -> str:
    """The guide's retrieval cell: keys retrieved with the question / before it, n, per haystack,
    and where a test (or the construction) puts the operation below the exact cache."""
    if not axis:
        return "—"
    parts = []
    for hay, regimes in axis.items():
        a, g = regimes["aware"], regimes["agnostic"]
        parts.append(f"{hay}: {a['accuracy_pct']:.0f} / {g['accuracy_pct']:.0f} % (n = {a['n']})")
    lost = loses_keys(axis)
    return "; ".join(parts) + (f"; loses keys: {', '.join(lost)}" if lost else "; no detectable loss")


def loss_clause(axis: dict) -> str:
    """Why a row lost its near-exact colour to retrieval: each loss with the test that found it."""
    out = []
    for hay, regimes in axis.items():
        for regime, v in regimes.items():
            if not v["lost"]:
                continue
            out.append(f"{hay} {REGIME_SHORT[regime]}, {v['correct']} of {v['n']} keys ({v['verdict']})")
    return "retrieval loses keys: " + "; ".join(out)


def retrieval_summary(retrieval: dict, model: str) -> str:
    """One cell for the conclusions' summary table: the exact cache's keys per gated haystack, and
    which methods lose keys (a test or the construction, in either regime) and which show no loss."""
    result = haystacks(retrieval.get(model) or {})
    exact = [f"{hay} {sum(bool(x['correct']) for x in r['exact']['per_prompt'])} of "
             f"{len(r['exact']['per_prompt'])} prompts" for hay, r in result.items()]
    gated = {hay: r for hay, r in result.items() if any(r.get("gate", {}).values())}
    if not gated:
        return f"exact cache: {', '.join(exact) or 'not run'}; below the gate, no method judged"
    labels = dict.fromkeys(label for r in gated.values() for label in r["ops"])
    lost, kept = [], []
    for label in labels:
        axis = _axis(retrieval, model, lambda r, label=label: label if label in r["ops"] else None)
        (lost if loses_keys(axis) else kept).append(short(label))
    return (f"exact cache: keys of {', '.join(exact)}; losing keys somewhere: {', '.join(lost) or 'none'}; "
            f"no detectable loss: {', '.join(kept) or 'none'}")
