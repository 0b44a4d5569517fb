"""One way to compare two things measured on the same units, used by every page.

Every comparative word the book prints ("beats", "best", "tied", "from depth k on", "the knee")
comes from a `Paired` result of this module, with its n, its effect and a 95 % interval.

The method, stated once (`METHOD`): for numbers paired over the unit that varies (documents for
KL divergence, held-out examples for accuracy, repeats for time), the effect is the mean of the
differences a − b; its 95 % interval is a paired percentile bootstrap (`scipy.stats.bootstrap`,
10,000 resamples of the units, fixed seed, so the same numbers give the same interval). A verdict
needs both the interval to exclude 0 and an exact two-sided sign test over the non-zero
differences at p < 0.05 (for right/wrong outcomes that sign test is McNemar's exact test). Below
6 units no verdict is possible whatever the data (the smallest p is 2/2⁵ = 0.0625 at 5,
`smallest_p`): such a result is "cannot separate" (`CANNOT`), and the page says the test could
not decide at that n, not that it found no difference. Otherwise the result is "no detectable
difference at n = …". Differences that are all exactly zero are "identical": a tie the caller
must explain (it usually holds by construction), never a measured one.

Two groups of repeats that are not paired (timings at two context lengths) are compared by an
exact Mann–Whitney rank test (`ranked`): with 5 repeats a side, every repeat of one above every
repeat of the other gives p = 2/252 ≈ 0.008.

A rate against chance (a probe right on 19 of 32 pairs where guessing gives 1/2) is an exact
binomial test with its Clopper–Pearson interval (`against_chance`).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from kvutils.core.near_exact import NEAR_EXACT_PCT  # noqa: F401 (the book's near-exact line, named here too)

ALPHA = 0.05  # two-sided level of every test (95 % intervals)
RESAMPLES = 10_000  # bootstrap resamples of the paired units
SEED = 0  # the bootstrap's seed: same numbers, same interval

# the verdicts a `Paired` can carry
A_LOWER, A_HIGHER = "a<b", "a>b"
NO_DIFFERENCE = "no detectable difference"
IDENTICAL = "identical"
CANNOT = "cannot separate"  # too few units for the exact test to reach p < ALPHA, whatever the data

METHOD = ("Comparisons are paired over the unit that varies (documents, held-out examples or "
          "repeats): the effect is the mean difference, its 95 % interval a paired bootstrap "
          f"({RESAMPLES:,} resamples), and a verdict is given only when that interval excludes 0 "
          "and an exact two-sided sign test (McNemar's test for right/wrong answers) gives "
          "p < 0.05; otherwise the page says there is no detectable difference at that n.")


@dataclass(frozen=True)
class Paired:
    """a against b over n paired units. `effect` = mean(a − b); `ci95` its 95 % interval (None
    when n < 2); `p` the exact sign test's two-sided p-value; `verdict` one of A_LOWER,
    A_HIGHER, NO_DIFFERENCE, IDENTICAL."""

    a: str
    b: str
    n: int
    effect: float
    ci95: tuple[float, float] | None
    p: float
    verdict: str
    unit: str = "documents"

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ci95"] = list(self.ci95) if self.ci95 is not None else None
        return out

    @classmethod
    def from_dict(cls, d: Mapping) -> Paired:
        ci = d.get("ci95")
        return cls(a=d["a"], b=d["b"], n=int(d["n"]), effect=float(d["effect"]),
                   ci95=tuple(ci) if ci is not None else None, p=float(d["p"]),
                   verdict=d["verdict"], unit=d.get("unit", "documents"))

    @property
    def separated(self) -> bool:
        return self.verdict in (A_LOWER, A_HIGHER)

    def better(self, lower_is_better: bool = True) -> str | None:
        """The name of the better of the two, or None when the test does not separate them."""
        if not self.separated:
            return None
        a_lower = self.verdict == A_LOWER
        return self.a if a_lower == lower_is_better else self.b

    def interval(self, digits: int = 3) -> str:
        """'n = 8, difference +0.012 [+0.004, +0.020]' (a − b, 95 % interval)."""
        if self.ci95 is None:
            return f"n = {self.n}, difference {_signed(self.effect, digits)}"
        lo, hi = self.ci95
        return (f"n = {self.n} {self.unit}, difference {_signed(self.effect, digits)} "
                f"[{_signed(lo, digits)}, {_signed(hi, digits)}]")

    def withheld(self) -> str:
        """Why no verdict was drawn where a reader might expect one, or "": the exact test cannot
        reach p < ALPHA at this n (CANNOT), or p < ALPHA while the interval includes 0."""
        if self.verdict == CANNOT:
            return (f"an exact sign test over {self.n} {self.unit} reaches p ≥ {smallest_p(self.n):.2g} "
                    "whatever the data")
        if self.verdict == NO_DIFFERENCE and self.p < ALPHA:
            return "p is below 0.05 but the 95 % interval includes no difference, and a verdict needs both"
        return ""

    def cannot_clause(self, digits: int = 3) -> str:
        """Why no verdict could be drawn at this n, with the difference measured."""
        return f"no verdict possible at n = {self.n} {self.unit} ({self.withheld()}; {self.interval(digits)})"

    def sentence(self, lower_is_better: bool = True, metric: str = "", digits: int = 3) -> str:
        """One clause: who is better and by how much, or that no difference was detected."""
        what = f" in {metric}" if metric else ""
        if self.verdict == IDENTICAL:
            return f"{self.a} and {self.b} are identical{what} on all {self.n} {self.unit}"
        if self.verdict == CANNOT:
            return f"{self.a} against {self.b}{what}: {self.cannot_clause(digits)}"
        if not self.separated:
            rule = f"; {self.withheld()}" if self.withheld() else ""
            return (f"no detectable difference{what} between {self.a} and {self.b} at "
                    f"{self.interval(digits)}, 95 % interval, p = {self.p:.2g}{rule}")
        winner = self.better(lower_is_better)
        loser = self.b if winner == self.a else self.a
        return (f"{winner} beats {loser}{what} ({self.interval(digits)}, 95 % interval, "
                f"p = {self.p:.2g})")


def _signed(x: float, digits: int) -> str:
    return f"{x:+.{digits}g}".replace("-", "−")


def _bootstrap_mean(diffs: np.ndarray, seed: int) -> tuple[float, float]:
    if np.all(diffs == diffs[0]):  # the resampled mean is that value every time
        return float(diffs[0]), float(diffs[0])
    res = stats.bootstrap((diffs,), np.mean, n_resamples=RESAMPLES, confidence_level=1 - ALPHA,
                          method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def mean_interval(values: Sequence[float]) -> tuple[float, float]:
    """The 95 % percentile-bootstrap interval of a mean (seeded: the same values, the same interval)."""
    return _bootstrap_mean(np.asarray(values, dtype=float), SEED)


def proportion_interval(successes: int, n: int) -> tuple[float, float]:
    """The Clopper–Pearson 95 % interval of successes / n."""
    ci = stats.binomtest(int(successes), int(n)).proportion_ci(confidence_level=1 - ALPHA, method="exact")
    return float(ci.low), float(ci.high)


def smallest_p(n: int) -> float:
    """The smallest two-sided p an exact sign test can give over n units (all differing one way)."""
    return min(1.0, 2 * 0.5 ** n) if n > 0 else 1.0


def can_separate(n: int) -> bool:
    """Whether n paired units can ever give a verdict at ALPHA (n ≥ 6)."""
    return smallest_p(n) < ALPHA


def sign_test(diffs: Sequence[float]) -> float:
    """Exact two-sided sign test over the non-zero differences (1.0 when none differs)."""
    d = np.asarray(diffs, dtype=float)
    nonzero = d[d != 0]
    if nonzero.size == 0:
        return 1.0
    return float(stats.binomtest(int((nonzero > 0).sum()), int(nonzero.size), 0.5).pvalue)


def paired(a: Sequence[float], b: Sequence[float], a_name: str = "a", b_name: str = "b",
           unit: str = "documents", seed: int = SEED) -> Paired:
    """Compare a and b measured on the same units (a[i] and b[i] on unit i)."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"paired: {a_name} and {b_name} must be equal-length lists "
                         f"(got {x.shape} and {y.shape})")
    if x.size == 0:
        raise ValueError(f"paired: no {unit} to compare {a_name} and {b_name} on")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"paired: {a_name} or {b_name} holds a value that is not finite")
    diffs = x - y
    n = int(diffs.size)
    effect = float(diffs.mean())
    if np.all(diffs == 0):
        return Paired(a_name, b_name, n, 0.0, (0.0, 0.0), 1.0, IDENTICAL, unit)
    p = sign_test(diffs)
    ci = _bootstrap_mean(diffs, seed) if n >= 2 else None
    verdict = NO_DIFFERENCE if can_separate(n) else CANNOT
    if ci is not None and p < ALPHA and (ci[0] > 0 or ci[1] < 0):
        verdict = A_HIGHER if ci[0] > 0 else A_LOWER
    return Paired(a_name, b_name, n, effect, ci, p, verdict, unit)


def paired_binary(a_right: Sequence[bool], b_right: Sequence[bool], a_name: str = "a",
                  b_name: str = "b", unit: str = "examples", seed: int = SEED) -> Paired:
    """Right/wrong outcomes of a and b on the same examples: the effect is the difference in
    accuracy (a − b), the p-value McNemar's exact test (the sign test of the discordant pairs)."""
    return paired(np.asarray(a_right, dtype=float), np.asarray(b_right, dtype=float),
                  a_name, b_name, unit, seed)


@dataclass(frozen=True)
class Rate:
    """`successes` of `n` against a chance rate: exact binomial test, Clopper–Pearson interval."""

    successes: int
    n: int
    chance: float
    rate: float
    ci95: tuple[float, float]
    p: float
    above: bool  # the test separates the rate from chance, upwards
    below: bool
    clusters: str = ""  # "16 words": the test ran over these clusters of items (clustered_against_chance)

    def to_dict(self) -> dict:
        out = asdict(self)
        out["ci95"] = list(self.ci95)
        return out

    def sentence(self, what: str = "right") -> str:
        lo, hi = self.ci95
        over = f", sign test over {self.clusters}" if self.clusters else ""
        base = (f"{what} on {self.successes} of {self.n} ({100 * self.rate:.0f} %, 95 % interval "
                f"{100 * lo:.0f}–{100 * hi:.0f} %; chance {100 * self.chance:.0f} %, p = {self.p:.2g}{over})")
        if self.above:
            return base + ", above chance"
        if self.below:
            return base + ", below chance"
        return base + f", no detectable difference from chance at n = {self.n}"


def against_chance(successes: int, n: int, chance: float) -> Rate:
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"against_chance: need 0 <= successes <= n and n >= 1 (got {successes}/{n})")
    if not 0 < chance < 1:
        raise ValueError(f"against_chance: chance must lie strictly between 0 and 1 (got {chance})")
    test = stats.binomtest(int(successes), int(n), chance)
    ci = test.proportion_ci(confidence_level=1 - ALPHA, method="exact")
    rate = successes / n
    significant = test.pvalue < ALPHA
    return Rate(int(successes), int(n), float(chance), rate, (float(ci.low), float(ci.high)),
                float(test.pvalue), significant and rate > chance, significant and rate < chance)


@dataclass(frozen=True)
class Ranked:
    """Two unpaired groups of repeats: an exact two-sided Mann–Whitney test. `verdict` A_HIGHER when
    a's values lie above b's (p < ALPHA), A_LOWER below, CANNOT where the group sizes cannot reach
    ALPHA whatever the data, else NO_DIFFERENCE."""

    a: str
    b: str
    n_a: int
    n_b: int
    p: float
    verdict: str

    def clause(self) -> str:
        sizes = f"{self.n_a} and {self.n_b} repeats"
        if self.verdict == CANNOT:
            return (f"no verdict possible with {sizes} (an exact rank test reaches p ≥ "
                    f"{smallest_rank_p(self.n_a, self.n_b):.2g} whatever the data)")
        if self.verdict == NO_DIFFERENCE:
            return (f"no detectable difference between {self.a} and {self.b} ({sizes}, exact rank test p = "
                    f"{self.p:.2g})")
        side = "above" if self.verdict == A_HIGHER else "below"
        return f"{self.a} lies {side} {self.b} ({sizes}, exact rank test p = {self.p:.2g})"


def smallest_rank_p(n_a: int, n_b: int) -> float:
    """The smallest two-sided p of an exact Mann–Whitney test with these group sizes."""
    return min(1.0, 2 / math.comb(n_a + n_b, n_a)) if n_a and n_b else 1.0


def ranked(a: Sequence[float], b: Sequence[float], a_name: str = "a", b_name: str = "b") -> Ranked:
    """a against b, two groups of repeats that are not paired (an exact Mann–Whitney test)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.ndim != 1 or y.ndim != 1 or not x.size or not y.size:
        raise ValueError(f"ranked: {a_name} and {b_name} must be non-empty lists")
    p = float(stats.mannwhitneyu(x, y, alternative="two-sided", method="exact").pvalue)
    if smallest_rank_p(x.size, y.size) >= ALPHA:
        verdict = CANNOT
    elif p < ALPHA:
        verdict = A_HIGHER if np.median(x) > np.median(y) else A_LOWER
    else:
        verdict = NO_DIFFERENCE
    return Ranked(a_name, b_name, int(x.size), int(y.size), p, verdict)


def pairwise(values: Mapping[str, Sequence[float]], unit: str = "documents",
             seed: int = SEED) -> list[Paired]:
    """Every pair of `values` (name → one number per unit, the units the same for all)."""
    names = list(values)
    return [paired(values[a], values[b], a, b, unit, seed)
            for i, a in enumerate(names) for b in names[i + 1:]]


def best(values: Mapping[str, Sequence[float]], lower_is_better: bool = True, unit: str = "documents",
         seed: int = SEED) -> tuple[str | None, list[str]]:
    """(the one name the tests put ahead of every other, or None; the names no test separates
    from the leader by mean, the leader included). 'Best' is written only when the first is set."""
    if not values:
        raise ValueError("best: nothing to compare")
    sign = 1.0 if lower_is_better else -1.0
    leader = min(values, key=lambda k: sign * float(np.mean(values[k])))
    tied = [leader]
    for name in values:
        if name == leader:
            continue
        result = paired(values[leader], values[name], leader, name, unit, seed)
        if result.better(lower_is_better) != leader:
            tied.append(name)
    return (leader if len(tied) == 1 else None), tied


def first_from(results: Sequence[Paired | Rate], lower_is_better: bool = False) -> int | None:
    """The first index k from which every result separates in the wanted direction (a `Rate`
    above chance; a `Paired` with its a better), or None: 'from depth k on' is earned only then."""
    def ok(r) -> bool:
        if isinstance(r, Rate):
            return r.below if lower_is_better else r.above
        return r.better(lower_is_better) == r.a
    start = None
    for k, r in enumerate(results):
        if ok(r):
            start = k if start is None else start
        else:
            start = None
    return start


def resampled_flips(values: Mapping[str, Sequence[float]], lower_is_better: bool = True,
                    resamples: int = 1000, seed: int = SEED) -> dict:
    """How stable the ranking of means is: resample the units with replacement and count, for each
    pair, the share of resamples whose order of means differs from the full sample's."""
    names = list(values)
    matrix = np.asarray([values[k] for k in names], dtype=float)  # (methods, units)
    rng = np.random.default_rng(seed)
    n = matrix.shape[1]
    idx = rng.integers(0, n, size=(resamples, n))
    means = matrix[:, idx].mean(axis=2)  # (methods, resamples)
    full = matrix.mean(axis=1)
    out = {}
    for i, a in enumerate(names):
        for j in range(i + 1, len(names)):
            if full[i] == full[j]:
                continue
            order = np.sign(full[i] - full[j])
            out[f"{a} vs {names[j]}"] = float(np.mean(np.sign(means[i] - means[j]) != order))
    return out



def clustered_against_chance(right: Sequence[Sequence[int]], chance: float, unit: str = "words") -> Rate:
    """Right answers grouped in clusters (a word's items: its two senses share the word, so they
    are not independent draws) against a chance rate. The test is an exact sign test over the
    clusters (each cluster's share of right answers above or below chance; ties dropped), the
    interval a percentile bootstrap that resamples whole clusters (of equal size, so the rate is the
    mean of their shares); `successes` and `n` count items."""
    sizes = {len(c) for c in right}
    if len(sizes) != 1 or 0 in sizes or not 0 < chance < 1:
        raise ValueError("clustered_against_chance: need clusters of one size ≥ 1 and 0 < chance < 1 (got "
                         f"sizes {sorted(sizes)}, chance {chance})")
    shares = np.asarray([np.mean(c) for c in right], dtype=float)
    successes, n = int(sum(sum(c) for c in right)), len(right) * sizes.pop()
    p = sign_test(shares - chance)
    lo, hi = _bootstrap_mean(shares, SEED)
    rate = successes / n
    return Rate(successes, n, float(chance), rate, (float(lo), float(hi)), p, p < ALPHA and rate > chance,
                p < ALPHA and rate < chance, f"{len(shares)} {unit}")


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of p-values tested together (e.g. one per depth): a depth picked
    for its smallest p is judged at its adjusted p, so the choice among many is paid for."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [1.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
