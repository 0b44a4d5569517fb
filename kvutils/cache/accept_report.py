"""What an acceptance run says: each metric's 95 % interval over the documents, a verdict per
operation against the near-exact line, and the printed table (kvutils.cache.accept scores).

Every interval and test comes from kvutils.core.compare, the book's one rule:
- KL(exact || op) (nats) and top-1 agreement (%): the mean over documents, with its paired
  percentile bootstrap interval (`compare.mean_interval`, seeded);
- perplexity: exp of the mean over documents of each one's mean negative log-likelihood (nats per
  token; the documents score equally many tokens, so this is the pooled perplexity), its interval
  that mean's interval, exponentiated; beside it the change against the exact cache, paired;
- the verdict: each document's top-1 agreement against the line (`compare.paired`, as the
  conclusions' decision guide tests it): "near-exact" where the 95 % interval lies wholly above it
  and an exact sign test gives p < 0.05, "costly" wholly below, else "not separated at n = ...".
One document gives no interval (None) and no verdict.
"""
from __future__ import annotations

import math

from kvutils.core import compare
from kvutils.core.near_exact import NEAR_EXACT_PCT

NEAR_EXACT, COSTLY = "near-exact", "costly"
# what each number of a run is measured in (the table's headers and the JSON's "units")
UNITS = {"mean_kl": "nats per token", "top1_agreement_pct": "% of scored tokens",
         "perplexity": "no unit (exp nats)",
         "perplexity_vs_exact": "difference in perplexity (op − exact)", "cache_bytes": "bytes",
         "seconds": "seconds"}
RULE = ("each document's top-1 agreement against the line; near-exact = its 95 % interval wholly above and "
        "an exact sign test p < 0.05, costly = wholly below, otherwise not separated")


def not_separated(n: int) -> str:
    return f"not separated at n = {n}"


def intervals(per_document: list[dict]) -> dict:
    """{metric: [low, high]} over the documents (each one's mean_kl, top1_agreement_pct and
    perplexity), or None per metric when there is a single document."""
    if len(per_document) < 2:
        return {"mean_kl": None, "top1_agreement_pct": None, "perplexity": None}
    kl = compare.mean_interval([d["mean_kl"] for d in per_document])
    top1 = compare.mean_interval([d["top1_agreement_pct"] for d in per_document])
    log_ppl = compare.mean_interval([math.log(d["perplexity"]) for d in per_document])
    return {"mean_kl": list(kl), "top1_agreement_pct": list(top1),
            "perplexity": [math.exp(x) for x in log_ppl]}


def exact_perplexity_interval(run: dict) -> list[float] | None:
    per_doc = run.get("exact_perplexity_per_document") or []
    if len(per_doc) < 2:
        return None
    return [math.exp(x) for x in compare.mean_interval([math.log(p) for p in per_doc])]


def perplexity_against_exact(run: dict, spec: str) -> compare.Paired:
    """An operation's perplexity against the exact cache's, paired over the run's documents."""
    per_doc = [d["perplexity"] for d in run["ops"][spec]["per_document"]]
    return compare.paired(per_doc, run["exact_perplexity_per_document"], spec, "exact")


def threshold_test(spec: str, top1_per_document: list[float], threshold_pct: float) -> compare.Paired:
    """Top-1 agreement per document against the line, paired over the documents (the guide's test)."""
    return compare.paired(top1_per_document, [threshold_pct] * len(top1_per_document), spec,
                          f"{threshold_pct:g} %")


def verdict_of(test: compare.Paired) -> str:
    """near-exact, costly, or not separated at n = ... (a tie at the line, or too few documents, included)."""
    if test.verdict == compare.A_HIGHER:
        return NEAR_EXACT
    if test.verdict == compare.A_LOWER:
        return COSTLY
    return not_separated(test.n)


def verdict_line(spec: str, mean_top1: float, test: compare.Paired, threshold_pct: float) -> str:
    """One line: the verdict, the top-1 agreement with its interval, where it lies against the line, n and
    p."""
    label = verdict_of(test)
    at = f"the {threshold_pct:g} % line"
    if test.ci95 is None:
        return f"{spec}: {label}: top-1 {mean_top1:.2f} % on one document (no interval; give more documents)"
    lo, hi = (threshold_pct + x for x in test.ci95)
    measured = f"top-1 {mean_top1:.2f} % [{lo:.2f}, {hi:.2f}] (95 % interval, n = {test.n} documents)"
    if label == NEAR_EXACT:
        where = f"wholly above {at}, sign test p = {test.p:.2g}"
    elif label == COSTLY:
        where = f"wholly below {at}, sign test p = {test.p:.2g}"
    elif test.verdict == compare.IDENTICAL:
        where = f"every document exactly at {at}"
    elif test.withheld():
        where = test.withheld()
    else:
        where = f"the interval straddles {at} (sign test p = {test.p:.2g})"
    return f"{spec}: {label}: {measured}; {where}"


def decide(run: dict, threshold_pct: float = NEAR_EXACT_PCT) -> dict:
    """The run with its intervals and verdicts: per operation "ci95" {metric: [low, high]},
    "perplexity_vs_exact" (a compare.Paired as a dict) and "verdict" {verdict, line, threshold_pct,
    test}; at the top "exact_perplexity_ci95", "threshold_pct", "rule" and "units". Idempotent
    for the same threshold."""
    out = {**run, "threshold_pct": threshold_pct, "rule": RULE, "units": UNITS,
           "exact_perplexity_ci95": exact_perplexity_interval(run), "ops": {}}
    for spec, o in run.get("ops", {}).items():  # none where every operation was refused
        docs = o["per_document"]
        test = threshold_test(spec, [d["top1_agreement_pct"] for d in docs], threshold_pct)
        out["ops"][spec] = {**o, "ci95": intervals(docs),
                            "perplexity_vs_exact": perplexity_against_exact(run, spec).to_dict(),
                            "verdict": {"verdict": verdict_of(test), "threshold_pct": threshold_pct,
                                        "line": verdict_line(spec, o["top1_agreement_pct"], test,
                                                             threshold_pct),
                                        "test": test.to_dict()}}
    return out


def _with_ci(value: float, ci: list[float] | None, digits: str = ".3g") -> str:
    """'0.0123 [0.0101, 0.0150]', or the value alone without an interval."""
    if ci is None:
        return f"{value:{digits}}"
    return f"{value:{digits}} [{ci[0]:{digits}}, {ci[1]:{digits}}]"


def _delta(test: compare.Paired) -> str:
    """'+0.31 [+0.12, +0.55]', or the difference alone where n < 2."""
    if test.ci95 is None:
        return f"{test.effect:+.3g}"
    return f"{test.effect:+.3g} [{test.ci95[0]:+.3g}, {test.ci95[1]:+.3g}]"


HEADERS = ("operation", "KL, nats [95 % CI]", "top-1, % [95 % CI]", "perplexity, no unit [95 % CI]",
           "ppl − exact [95 % CI]", "cache, KiB", "× smaller, ratio", "time, s")


def _columns(cells: list[tuple]) -> list[str]:
    """Rows of cells as aligned text: the first column left-aligned, the others right-aligned, each
    as wide as its widest cell."""
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    return [" ".join([f"{row[0]:{widths[0]}s}", *(f"{c:>{w}s}" for c,
                                                  w in zip(row[1:], widths[1:]))]) for row in cells]


def table(run: dict, threshold_pct: float | None = None) -> str:
    """The printed table: the exact cache's row first, then each operation's KL, top-1 agreement and
    perplexity with their 95 % intervals over the documents, its perplexity change against exact
    (paired), the bytes it holds and how many times fewer than exact, its seconds; then one
    verdict line per operation against the near-exact line (`decide`'s, or `threshold_pct`)."""
    if threshold_pct is not None or "threshold_pct" not in run:
        run = decide(run, NEAR_EXACT_PCT if threshold_pct is None else threshold_pct)
    n = len(run["documents"])
    exact_ppl = _with_ci(run["exact_perplexity"], run["exact_perplexity_ci95"], ".5g")
    cells = [HEADERS, ("exact (the reference)", "0", "100", exact_ppl, "",
                       f"{run['exact_cache_bytes'] / 1024:.1f}",
                       "1.00", f"{run['exact_seconds']:.2f}")]
    tests = {}
    for spec, r in run["ops"].items():
        tests[spec] = compare.Paired.from_dict(r["perplexity_vs_exact"])
        smaller = run["exact_cache_bytes"] / r["cache_bytes"] if r["cache_bytes"] else float("inf")
        ci = r["ci95"]
        cells.append((spec, _with_ci(r["mean_kl"], ci["mean_kl"]),
                      _with_ci(r["top1_agreement_pct"], ci["top1_agreement_pct"], ".2f"),
                      _with_ci(r["perplexity"], ci["perplexity"], ".5g"), _delta(tests[spec]),
                      f"{r['cache_bytes'] / 1024:.1f}", f"{smaller:.2f}", f"{r['seconds']:.2f}"))
    head, *body = _columns(cells)
    rows = [f"{run['model']['name']}: n = {n} documents, prefill {run['prefill']} tokens, decode "
            f"{run['decode']} tokens, {run['dtype']}, {run['path']} path; exact perplexity {exact_ppl}", head,
            "-" * len(head), *body]
    rows += [f"{spec} refused: {why}" for spec, why in run.get("refused", {}).items()]
    if tests:
        rows.append(f"verdict against the near-exact line, {run['threshold_pct']:g} % top-1 agreement (the "
                    f"book's line is {NEAR_EXACT_PCT:g} %; --threshold PCT to change it). Rule: {RULE}:")
        rows += [f"  {r['verdict']['line']}" for r in run["ops"].values()]
    if tests and not compare.can_separate(n):
        rows.append(f"ppl − exact: the mean over n = {n} documents with a 95 % bootstrap interval; at n = "
                    f"{n} no operation can be told from exact (an exact sign test needs n ≥ 6 to reach p < "
                    "0.05): give more documents (--n-docs, --docs)")
    elif tests:
        rows.append(
            f"ppl − exact: the mean over n = {n} documents, 95 % bootstrap interval, exact sign test:")
        rows += [f"  {t.sentence(lower_is_better=True, metric='perplexity')}" for t in tests.values()]
    return "\n".join(rows)
