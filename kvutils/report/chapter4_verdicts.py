"""Chapter 4's verdict rules, each one procedure whose interval or test the page shows beside it.

* `retrieval_verdict`: a method loses retrieval when McNemar's exact test puts its keys retrieved
  below the exact cache's, or when the 95 % interval of the key's log-probability shift lies wholly
  below −`LOGPROB_MARGIN`. A shift detectably below 0 but within the margin reads "small, x nats";
  "fewer keys" is never said where every key is still retrieved.
* `sign_verdict`: a paired comparison over a few documents, decided by the distribution-free 95 %
  interval of the median difference (order statistics, the sign test's own interval). The verdict is
  that interval: it excludes 0 or it does not. Below 6 units no such interval exists, and the page
  says "not separated at n = …".
* `deduplicated`: methods identical by construction count once in Kendall's τ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from kvutils.core import compare
from kvutils.studies.cache_approximations.retrieval import frontier_label, kl_vs_retrieval

# The key's log-probability may fall by this much (nats) before a shift counts as a loss: the key's
# probability then stays above e^-0.1 = 90.5 % of the exact cache's. A rounding-only change (the bf16
# cache) moves it by about 0.002 nats; a lost key moves it by nats.
LOGPROB_MARGIN = 0.1

KEEPS, LOSES, SMALL, UNSEPARATED, BUILT = "✓", "✗", "≈", "?", "="
@dataclass(frozen=True)
class RetrievalVerdict:
    """One method against the exact cache on the same prompts: keys retrieved by each, McNemar's exact
    p, the mean shift of the key's log-probability (method − exact, nats) with its paired 95 %
    bootstrap interval, and the verdict (`mark`, `words`) drawn from those two only."""

    n: int
    keys: int
    exact_keys: int
    p: float
    shift: float
    interval: tuple[float, float]
    mark: str
    words: str
    built: int = 0  # prompts whose cache holds none of the needle's entries


def mcnemar(method_right, exact_right) -> float:
    """McNemar's exact test: the two-sided sign test over the discordant prompts."""
    return compare.sign_test(np.asarray(method_right, float) - np.asarray(exact_right, float))


def retrieval_verdict(
    exact: list[dict], method: list[dict], margin: float = LOGPROB_MARGIN, built: int = 0
) -> RetrievalVerdict:
    """`exact` and `method`: per-prompt records {"correct", "key_logprob"} on the same prompts."""
    if len(exact) != len(method) or not exact:
        raise ValueError(
            f"retrieval_verdict: exact and method must hold the same prompts "
            f"(got {len(exact)} and {len(method)})"
        )
    right = [bool(x["correct"]) for x in method]
    exact_right = [bool(x["correct"]) for x in exact]
    diffs = np.asarray([m["key_logprob"] - e["key_logprob"] for m, e in zip(method, exact)], float)
    keys, exact_keys, n = sum(right), sum(exact_right), len(exact)
    p = mcnemar(right, exact_right)
    shift = float(diffs.mean())
    interval = compare.mean_interval(diffs) if n > 1 else (shift, shift)
    if p < compare.ALPHA and keys < exact_keys:
        mark, words = LOSES, "fewer keys"
    elif interval[1] < -margin:
        mark, words = LOSES, "lower key log-probability"
    elif shift < -margin:
        mark, words = UNSEPARATED, f"not separated from the {margin:g}-nat margin at n = {n}"
    elif interval[1] < 0:
        mark, words = SMALL, "small shift"
    else:
        mark, words = KEEPS, "no detectable loss"
    if built:
        mark, words = f"{mark} {BUILT}", f"{words}; needle gone on {built} prompts"
    return RetrievalVerdict(n, keys, exact_keys, p, shift, tuple(interval), mark, words, built)


def median_interval(diffs) -> tuple[float, float] | None:
    """The distribution-free 95 % interval of the median difference: order statistics x(k) and
    x(n+1−k), k the largest with P(Binomial(n, ½) < k) ≤ 2.5 % (coverage ≥ 95 %). None below 6 units,
    where no such interval exists (`compare.can_separate`)."""
    x = np.sort(np.asarray(diffs, float))
    n, k = x.size, 0
    while k < n // 2 and stats.binom.cdf(k, n, 0.5) <= compare.ALPHA / 2:
        k += 1
    return None if k == 0 else (float(x[k - 1]), float(x[n - k]))


@dataclass(frozen=True)
class SignVerdict:
    """a − b over n paired units: how many are lower and higher, the median difference, its 95 %
    interval (`median_interval`) and the verdict that interval gives."""

    n: int
    lower: int
    higher: int
    median: float
    interval: tuple[float, float] | None
    verdict: str  # compare.A_LOWER, compare.A_HIGHER, compare.IDENTICAL or "not separated at n = …"

    @property
    def separated(self) -> bool:
        return self.verdict in (compare.A_LOWER, compare.A_HIGHER)


def sign_verdict(a, b) -> SignVerdict:
    """a against b on the same units, one procedure: the verdict is the interval shown."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if d.size == 0 or np.asarray(a).shape != np.asarray(b).shape:
        raise ValueError(f"sign_verdict: a and b must be equal-length, non-empty (got {len(a)} and {len(b)})")
    ci = median_interval(d)
    if np.all(d == 0):
        verdict = compare.IDENTICAL
    elif ci is not None and ci[1] < 0:
        verdict = compare.A_LOWER
    elif ci is not None and ci[0] > 0:
        verdict = compare.A_HIGHER
    else:
        verdict = f"not separated at n = {d.size}"
    return SignVerdict(int(d.size), int((d < 0).sum()), int((d > 0).sum()), float(np.median(d)), ci, verdict)


def deduplicated(methods: list[str], identical: list[tuple[str, str]]) -> tuple[list[str], dict[str, str]]:
    """`methods` with each one identical by construction to an earlier kept one left out: (the
    methods that count in τ, {left out: the one it duplicates})."""
    same: dict[str, set[str]] = {}
    for a, b in identical:
        same.setdefault(a, set()).add(b)
        same.setdefault(b, set()).add(a)
    kept, dropped = [], {}
    for m in methods:
        twin = next((k for k in kept if k in same.get(m, ())), None)
        if twin is None:
            kept.append(m)
        else:
            dropped[m] = twin
    return kept, dropped


def tau_once(
    frontier_run: dict | None, model_result: dict, regime: str = "aware"
) -> tuple[dict, dict[str, str]]:
    """Kendall's τ between the frontier's mean KL and keys retrieved, per level, as the study computes
    it (`kl_vs_retrieval`), with each method identical by construction to another (the frontier's
    `construction_ties`, and retrieving alike on every prompt) counted once. Returns (the levels, {left
    out: the method it duplicates})."""
    if not frontier_run:
        return {}, {}
    hays = {k: v for k, v in model_result.items() if k != "kl_vs_retrieval"}

    def labelled(spec: str) -> str | None:
        return frontier_label(spec, frontier_run["ops"][spec].get("level"))

    def records(lab: str) -> list:
        return [hay["ops"][lab][regime]["per_prompt"] if lab in hay["ops"] else None for hay in hays.values()]

    ties = [
        (labelled(t["a"]), labelled(t["b"]))
        for t in frontier_run.get("construction_ties", [])
        if t["b"] is not None and t["a"] in frontier_run["ops"] and t["b"] in frontier_run["ops"]
    ]
    ties = [(a, b) for a, b in ties if a and b and records(a) == records(b)]
    order = [lab for lab in (labelled(s) for s in frontier_run["ops"]) if lab]
    _, dropped = deduplicated(
        sorted(order, key=lambda lab: (lab.split("@")[0] == "adakv", order.index(lab))), ties
    )
    stored = model_result.get("kl_vs_retrieval", {})
    if not dropped and stored.get("regime") == regime and "levels" in stored:
        return stored["levels"], dropped  # nothing counted twice: the study's own τ
    once = {
        **frontier_run,
        "ops": {s: r for s, r in frontier_run["ops"].items() if labelled(s) not in dropped},
    }
    return kl_vs_retrieval(once, hays, regime)["levels"], dropped
