"""Chapter 4's follow-up questions (issue 51, SCBench's multi-turn setting): compress once, ask again.

A real-text haystack carries TURNS needles of different shapes
(`kvutils.core.haystack.build_prompts(turns=...)`),
asked in turn in one conversation; which needle comes first rotates, so every depth is asked first
and as each follow-up equally often. Each method compresses the cache once per regime (before the
first question: the prompt cache; with it: the question-aware cache) and every later question and
answer are teacher-forced through that same cache, after turn 1's question and answer extended it
as a server would (`kvutils.cache.retrieval`). Turn 1's records are the retrieval test's own
("per_prompt"); the follow-ups' are under "followups", beside them:
- per method and regime: {"per_prompt": [[record per follow-up] per prompt], "n", "accuracy",
  "by_depth", "by_turn", "mean_key_logprob", "needle_kept_mean", "construction_losses"};
- the exact cache's, and "gate_followups" per context: the exact cache's own follow-up accuracy
  against the gate, as for turn 1.
Verdicts ("followup_verdicts"), paired over prompts where both gates pass, on the share of a
prompt's follow-ups answered right: against turn 1 on the same cache, against the exact cache's
follow-ups, and the prompt cache (agnostic) against the question-aware one.
"""
from __future__ import annotations

import numpy as np

from kvutils.cache.retrieval import REGIMES, STEP_FOLLOWUPS, lost_by_construction
from kvutils.core import compare

# needles per real-text haystack in make book: turn 1 and TURNS - 1 follow-ups (one per depth and shape,
# rotated: `kvutils.core.haystack.turn_depths`, `turn_shapes`). With RULER's one shape for every needle the
# exact cache of smollm2-135m fell below the gate (1,024 tokens, 24 pydoc haystacks: turn 1 19/24, follow-ups
# 24/48; a follow-up's first digit copied the previous answer's); with three shapes, 24/24 and 45/48 (2,048:
# 23/24, 42/48). Each follow-up is teacher-forced through every method's cache in both regimes, so a method's
# cost grows with the chain: with 3 turns retrieval cost 2.2 times its one-question cost (5,354 s of one core
# for both models against 2,483 s); with 2 turns on 18 haystacks per context instead of 24 it is about what
# one question cost (issue 51)
TURNS = 2


def _mean(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else float("nan")


def block(per_prompt: list[list[dict]]) -> dict:
    """The summary of follow-up records, per prompt a list of one record per follow-up."""
    flat = [r for rs in per_prompt for r in rs]
    depth: dict = {}
    turn: dict = {}
    for r in flat:
        depth.setdefault(str(r["context"]), {}).setdefault(str(r["depth"]), []).append(r["correct"])
        turn.setdefault(str(r["turn"]), []).append(r["correct"])
    return {"per_prompt": per_prompt, "n": len(flat), "accuracy": _mean(r["correct"] for r in flat),
            "by_depth": {c: {d: _mean(v) for d, v in ds.items()} for c, ds in depth.items()},
            "by_turn": {t: _mean(v) for t, v in turn.items()},
            "mean_key_logprob": _mean(r["key_logprob"] for r in flat)}


def losses(needles: list[list], per_prompt: list[list[dict]]) -> dict:
    """The follow-ups lost by construction: the cache held none of the asked needle's entries
    when the follow-up was asked ([prompt position, turn] each), and how many were right anyway."""
    lost = [(i, r["turn"], r["correct"]) for i, (shares, rs) in enumerate(zip(needles, per_prompt))
            for s, r in zip(shares, rs) if lost_by_construction(s)]
    shares = [s for ss in needles for s in ss]
    return {"needle_kept_mean": np.asarray(shares, dtype=float).mean(0).round(4).tolist() if shares else [],
            "construction_losses": {"questions": [[i, t] for i, t, _ in lost],
                                    "correct": sum(bool(c) for *_, c in lost)}}


def summarise(result: dict, exact_followups: list[list[dict]], gate: float) -> dict:
    """`score_haystack`'s result with its raw follow-up records summarised (or dropped where the
    haystack has none, as the filler's pass key): see the module's docstring."""
    has = any(exact_followups)
    for entry in result["ops"].values():
        for regime in REGIMES:
            r = entry[regime]
            raw, needles = r.pop("followups", []), r.pop("followup_needle_kept", [])
            if has and not any(raw):
                r["followups"] = {"not_scored": STEP_FOLLOWUPS}
            elif has:
                r["followups"] = {**block(raw), **losses(needles, raw)}
    if not has:
        return result
    result["exact"]["followups"] = block(exact_followups)
    contexts = [p["context"] for p in result["prompts"]]
    result["gate_followups"] = {
        str(c): _mean(x["correct"] for i,
                      rs in enumerate(exact_followups) if contexts[i] == c for x in rs) >= gate
        for c in result["contexts"]}
    return result


def shares(per_prompt: list[list[dict]], metric: str = "correct") -> list[float]:
    """Per prompt, the mean of its follow-ups' `metric` (the share answered right)."""
    return [_mean(float(r[metric]) for r in rs) for rs in per_prompt]


def verdicts(result: dict) -> list[dict]:
    """Paired over the prompts whose context passes both gates (turn 1's and the follow-ups'):
    per method and regime, its follow-ups against its turn 1 (`against` "turn1"; metric "correct":
    the share of a prompt's follow-ups right against turn 1 right or wrong) and against the exact
    cache's follow-ups ("exact"; also on the key's log-probability), and per method the prompt
    cache against the question-aware one on follow-ups ("regime")."""
    gated = {c for c, ok in result["gate_followups"].items() if ok and result["gate"].get(c)}
    contexts = [str(p["context"]) for p in result["prompts"]]
    exact = result["exact"]["followups"]["per_prompt"]
    out = []

    def add(a, b, a_name, b_name, metric, regime, against):
        p = compare.paired(a, b, a_name, b_name, unit="prompts")
        out.append({**p.to_dict(), "metric": metric, "regime": regime, "against": against})

    for label, entry in result["ops"].items():
        kept = {regime: [] for regime in REGIMES}
        for regime in REGIMES:
            r = entry[regime]
            if "per_prompt" not in r["followups"]:
                continue
            keep = [j for j, i in enumerate(r["prompts"]) if contexts[i] in gated]
            fups = [r["followups"]["per_prompt"][j] for j in keep]
            kept[regime] = fups
            if not keep:  # no prompt passes both gates
                continue
            add(shares(fups), [float(r["per_prompt"][j]["correct"]) for j in keep], f"{label} follow-ups",
                f"{label} turn 1", "correct", regime, "turn1")
            ex = [exact[r["prompts"][j]] for j in keep]
            for metric in ("correct", "key_logprob"):
                add(shares(fups, metric), shares(ex, metric), f"{label} follow-ups", "exact follow-ups",
                    metric,
                    regime, "exact")
        if kept["agnostic"] and len(kept["agnostic"]) == len(kept["aware"]):
            add(shares(kept["agnostic"]), shares(kept["aware"]), f"{label} agnostic follow-ups",
                f"{label} aware follow-ups", "correct", "both", "regime")
    return out
