"""What chapter 4 found, as data (`kvutils.report.findings`): the answer, the box and each section's
point, each built from the results by one small function; the detail a section keeps one click away
is its tables (`chapter4_evidence`) and the computed text of `frontier` and `retrieval`."""

from __future__ import annotations

from kvutils.core import compare
from kvutils.core.near_exact import NEAR_EXACT_PCT
from kvutils.report import followups as report_followups
from kvutils.report import frontier as report_frontier
from kvutils.report import retrieval as report_retrieval
from kvutils.report import retrieval_seeds, retrieval_ties
from kvutils.report.cache_approximations import (
    chapter4_glue,
    kivi_table,
    line_test,
    paired_table,
    timing_clause,
)
from kvutils.report.chapter4_tables import REGIMES, frontier_verdicts, judged, retrieval_verdicts, tau_rows
from kvutils.report.chapter4_verdicts import KEEPS, LOGPROB_MARGIN, LOSES, SMALL, RetrievalVerdict
from kvutils.report.findings import Finding, PageFindings, Section, Test, captioned
from kvutils.report.names import human
from kvutils.report.timing import timing_table

MUCH_FASTER = 10  # a speed-up from this on reads "much faster"
ROUNDING = ("precision (cast)", "quantisation")  # the families that store every entry, in fewer bits
HEADLINE = (
    ("KIVI 4-bit", "quantize_kivi:bits=4,group=32,residual=128"),
    ("naive 4-bit", "quantize_naive:bits=4"),
    ("window 128 + 4 sinks", "window:size=128,sinks=4,reindex=false"),
)


def _longest_steps(decode: dict) -> list[tuple[str, dict]]:
    return [(m, max(r["steps"], key=lambda s: s["context"])) for m, r in decode.items() if r["steps"]]


def decode_finding(numbers: dict) -> Finding:
    steps = _longest_steps(numbers["decode"])
    slowest = min(s["speedup"] for _, s in steps)
    claim = (
        "The cache buys a much faster decode step."
        if slowest >= MUCH_FASTER
        else "The cache buys a faster decode step."
        if slowest > 1
        else "The cache did not speed up every step."
    )
    return Finding(
        "decode",
        claim,
        "At {context} tokens a cached step beat recomputing by {speedups}.",
        (
            ("context", max(s["context"] for _, s in steps)),
            ("speedups", ", ".join(f"{s['speedup']:.0f}× on {m}" for m, s in steps)),
        ),
        Test("median of timed repeats", min(s.get("repeats", 1) for _, s in steps), "repeats"),
    )


def bytes_finding(numbers: dict) -> Finding:
    ours = [r for r in numbers["bytes"] if r["source"] == "ours"]
    matched = sum(r["measured_kib_per_token"] == r["held_kib_per_token_fp32"] for r in ours)
    claim = (
        "It costs the bytes per token the formula says."
        if matched == len(ours)
        else "A filled cache held other bytes than expected."
    )
    return Finding(
        "bytes",
        claim,
        "At 16 bits: {kib}. A filled cache matched the bytes expected on {matched} of {n} models.",
        (
            ("kib", ", ".join(f"{r['kib_per_token']:g} KiB on {r['model'].split(' ')[0]}" for r in ours)),
            ("matched", matched),
            ("n", len(ours)),
        ),
    )


def table2_finding(numbers: dict) -> Finding | None:
    """Which of Table 2's approximations stay near-exact: each one's top-1 agreement per document
    tested against the book's line (`NEAR_EXACT_PCT`), the rule of the conclusions' guide, with the
    article's three headline rows named beside."""
    model, runs = next(iter(numbers["table2"].items()), (None, None))
    ops = {spec: o for spec, o in (((runs or {}).get("plain") or {}).get("ops") or {}).items()
           if o["family"] != "exact"}
    if not ops:
        return None
    tests = {spec: line_test(o) for spec, o in ops.items()}
    near = [spec for spec, t in tests.items() if t.verdict == compare.A_HIGHER]
    costly = [spec for spec, t in tests.items() if t.verdict == compare.A_LOWER]
    windows = [spec for spec, o in ops.items() if o["family"].startswith("window")]
    rounding_only = near and all(ops[spec]["family"] in ROUNDING for spec in near)
    claim = (
        "Only storing fewer bits stays near-exact; every window costs top-1."
        if rounding_only and set(windows) <= set(costly)
        else "Few approximations stay near-exact."
        if 2 * len(near) < len(ops)
        else "Half the approximations stay near-exact."
        if 2 * len(near) == len(ops)
        else "Most approximations stay near-exact."
    )
    # the article's headline rows among the costly, else the costliest
    named = [(name, spec) for name, spec in HEADLINE if spec in costly][:2] or [
        (human(spec), spec) for spec in sorted(costly, key=lambda c: ops[c]["top1_agreement_pct"])[:1]]
    return Finding(
        "table2",
        claim,
        "On {model}, {near_n} of {n} are near-exact: {near}. Costly: {costly}, among them {tops}.",
        (
            ("model", model),
            ("near_n", len(near)),
            ("n", len(ops)),
            ("near", ", ".join(human(spec) for spec in near) or "none"),
            ("costly", len(costly)),
            ("tops", ", ".join(f"{name} at {ops[spec]['top1_agreement_pct']:.1f} %" for name, spec in named)
             or "none"),
        ),
        Test(f"sign test of top-1 per document against {NEAR_EXACT_PCT:g} %",
             min(t.n for t in tests.values()), "documents"),
    )


def frontier_finding(frontier: dict) -> Finding | None:
    tests = [
        (model, t)
        for model, run in frontier.items()
        for _, _, t, _ in frontier_verdicts(run)
        if t is not None
    ]
    if not tests:
        return None
    n = min(t.n for _, t in tests)
    below = sum(t.verdict == "a<b" for _, t in tests)
    above = sum(t.verdict == "a>b" for _, t in tests)
    claim = (
        "Most deployed methods beat random eviction in KL."
        if 2 * below > len(tests)
        else "Few deployed methods separate from random eviction in KL."
    )
    return Finding(
        "frontier",
        claim,
        "Of {pairs} method–level pairs: below random eviction {below}, above it {above}, "
        "not separated at n = {n} documents {open}.",
        (
            ("pairs", len(tests)),
            ("below", below),
            ("above", above),
            ("open", len(tests) - below - above),
            ("n", n),
        ),
        Test("median-difference interval against random", n, "documents"),
    )


def every_verdict(retrieval: dict) -> list[tuple[str, RetrievalVerdict]]:
    """(method label, verdict against the exact cache) over every judged model, text and regime."""
    return [
        (lab, v)
        for _, _, r in judged(retrieval)
        for regime, _ in REGIMES
        for lab, v in retrieval_verdicts(r, regime).items()
    ]


def _retrieval_counts(verdicts: list[tuple[str, RetrievalVerdict]]) -> dict[str, dict[str, int]]:
    """{"eviction"|"precision": {"kept", "lost", "open", "n"}} (a label with "@" evicts): kept is no
    detectable loss or a shift within the margin, lost a loss (McNemar or beyond the margin, or the
    needle gone by construction), open not separated."""
    counts = {group: {"kept": 0, "lost": 0, "open": 0, "n": 0} for group in ("eviction", "precision")}
    for lab, v in verdicts:
        c = counts["eviction" if "@" in lab else "precision"]
        c[_outcome(v)] += 1
        c["n"] += 1
    return counts


def _outcome(v: RetrievalVerdict) -> str:
    if v.mark in (KEEPS, SMALL):
        return "kept"
    return "lost" if v.mark.startswith(LOSES) else "open"


def retrieval_finding(verdicts: list[tuple[str, RetrievalVerdict]]) -> Finding | None:
    counts = _retrieval_counts(verdicts)
    evict, prec = counts["eviction"], counts["precision"]
    if not evict["n"] and not prec["n"]:
        return None
    claim = (
        "Every eviction method loses keys far back."
        if evict["lost"] == evict["n"]
        else "Most eviction methods lose keys far back."
        if 2 * evict["lost"] > evict["n"]
        else "Eviction mostly keeps the keys far back."
        if 2 * evict["kept"] > evict["n"]
        else "Eviction loses keys far back in some tests, not in others."
    )
    n = max(v.n for _, v in verdicts)
    return Finding(
        "retrieval",
        claim,
        "Of {evict_n} method–text–regime tests, eviction lost keys in {evict_lost}, kept them in "
        "{evict_kept}; lower precision lost {prec_lost} and kept {prec_kept} of {prec_n}.",
        (("evict_n", evict["n"]), ("evict_lost", evict["lost"]), ("evict_kept", evict["kept"]),
         ("prec_lost", prec["lost"]), ("prec_kept", prec["kept"]), ("prec_n", prec["n"])),
        Test(f"McNemar, or a log-probability drop beyond {LOGPROB_MARGIN:g} nats", n, "prompts at most"),
    )


def margin_finding(verdicts: list[tuple[str, RetrievalVerdict]]) -> Finding | None:
    """The largest shift of the key's log-probability that a rounding-only change (a cast) caused."""
    shifts = [abs(v.shift) for lab, v in verdicts if lab.startswith("cast:")]
    if not shifts:
        return None
    return Finding(
        "margin",
        f"A loss of log-probability must exceed {LOGPROB_MARGIN:g} nats.",
        "A rounding-only change, the 16-bit cast, moved the key's mean log-probability by at most "
        "{largest} nats; a lost key moves it by nats.",
        (("largest", max(shifts)),),
    )


def tau_finding(retrieval: dict, frontier: dict) -> Finding | None:
    rows = tau_rows(retrieval, frontier or {})
    if not rows:
        return None
    predicts = sum(r["verdict"] == "KL predicts retrieval" for r in rows)
    disagree = sum(r["verdict"] == "the rankings disagree" for r in rows)
    claim = (
        "Mean KL did not detectably predict retrieval."
        if predicts == 0
        else "Mean KL predicts retrieval."
        if 2 * predicts > len(rows)
        else "Mean KL predicted retrieval in few cases."
    )
    return Finding(
        "tau",
        claim,
        "Kendall's τ between mean KL and keys retrieved, per model and level: agreement {predicts}, "
        "disagreement {disagree}, not separated {open}.",
        (("predicts", predicts), ("disagree", disagree), ("open", len(rows) - predicts - disagree)),
        Test(
            "bootstrap over documents and prompts",
            max(r["methods"] for r in rows),
            "methods per pair at most",
        ),
    )


def _followup_tests(retrieval: dict, against: str) -> list[dict]:
    """Every paired follow-up verdict of `against` ("turn1", "exact" or "regime") on keys retrieved."""
    return [v for per_model in retrieval.values() for hay in per_model.values() if isinstance(hay, dict)
            for v in hay.get("followup_verdicts", []) if v["against"] == against and v["metric"] == "correct"]


def followup_finding(retrieval: dict) -> Finding | None:
    """Compress once, ask again (issue 51): follow-ups against turn 1 through the same cache."""
    tests = _followup_tests(retrieval, "turn1")
    if not tests:
        return None
    lower = sum(v["verdict"] == compare.A_LOWER for v in tests)
    identical = sum(v["verdict"] == compare.IDENTICAL for v in tests)
    claim = (
        "Compressed once, most caches answer the next question worse than the first."
        if 2 * lower > len(tests)
        else "No compressed cache answered the next question detectably worse than the first."
        if lower == 0
        else "Compressed once, some caches answer the next question worse than the first."
    )
    regime = _followup_tests(retrieval, "regime")
    return Finding(
        "followups",
        claim,
        "Follow-ups were detectably worse than turn 1 in {lower} of {n} method–regime tests and identical in "
        "{identical}. The prompt cache answered follow-ups worse than the question-aware cache for {worse} "
        "of {methods} methods.",
        (("lower", lower), ("n", len(tests)), ("identical", identical),
         ("worse", sum(v["verdict"] == compare.A_LOWER for v in regime)), ("methods", len(regime))),
        Test("sign test of each prompt's follow-ups right against its turn 1", max(v["n"] for v in tests),
             "prompts at most"),
    )


def answer_finding(numbers: dict, box: list[Finding]) -> Finding:
    fastest = round(max(s["speedup"] for _, s in _longest_steps(numbers["decode"])))
    keys = {f.key: f for f in box}.get("retrieval")
    if keys is None:
        return Finding(
            "answer",
            "Speed for bytes.",
            "A cached step ran up to {fastest}× faster; no retrieval test was judged in this run.",
            (("fastest", fastest),),
        )
    lost, kept, n = keys.value("evict_lost"), keys.value("evict_kept"), keys.value("evict_n")
    claim = (
        "Speed for bytes; compressing the cache is not free."
        if 2 * lost > n
        else "Speed for bytes; eviction mostly keeps what is far back."
        if 2 * kept > n
        else "Speed for bytes; what eviction loses far back is not yet separated."
    )
    return Finding(
        "answer",
        claim,
        "A cached step ran up to {fastest}× faster, and eviction lost keys far back in {lost} of {n} "
        "retrieval tests.",
        (("fastest", fastest), ("lost", lost), ("n", n)),
    )


def chapter4_findings(numbers: dict) -> PageFindings:
    """Chapter 4's answer, box and section points, from the results."""
    retrieval, frontier = numbers.get("retrieval") or {}, numbers.get("frontier") or {}
    decode, size = decode_finding(numbers), bytes_finding(numbers)
    table2 = table2_finding(numbers)
    verdicts = every_verdict(retrieval)
    front, keys = frontier_finding(frontier), retrieval_finding(verdicts)
    tau = tau_finding(retrieval, frontier)
    box = [f for f in (decode, size, table2, keys, tau) if f is not None]
    points = {"decode": decode, "bytes": size, "table2": table2 or size, "frontier": front or size,
              "retrieval": keys or size, "followups": followup_finding(retrieval) or keys or size,
              "tau": tau or keys or size}
    more = {"retrieval": tuple(f for f in (margin_finding(verdicts),) if f)}
    details, tables = chapter4_evidence(numbers)
    sections = {name: Section(point, more.get(name, ()), details.get(name, ()), tables.get(name, ()))
                for name, point in points.items()}
    return PageFindings(answer_finding(numbers, box), tuple(box), sections)


def chapter4_evidence(numbers: dict) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple]]:
    """Each section's Evidence block: its texts, and its tables with their captions."""
    retrieval, frontier = numbers.get("retrieval") or {}, numbers.get("frontier") or {}
    glue = chapter4_glue(numbers)
    details = {
        "decode": (timing_clause(numbers), f"Memory bandwidth {glue['bandwidth']} GB/s; the bandwidth bound "
                   "is the time to stream the weights and the cache once at that rate."),
        "table2": (f"Setup: {glue['setup']}",),
        "frontier": (*report_frontier.frontier_notes(frontier), report_frontier.KVPRESS if frontier else ""),
        "retrieval": (retrieval_ties.head_ties(retrieval, frontier).strip(),
                      *(f"The needle: {text}" for text in report_retrieval.needle_examples().values()),
                      report_retrieval.KVPRESS if retrieval else ""),
        "followups": report_followups.exact_followups(retrieval),
    }
    tables = {
        "decode": (("Every timed step: median [min–max] over the repeats", timing_table(numbers["decode"])),),
        "table2": captioned(
            ("KIVI against naive quantisation at equal bits", kivi_table(numbers["table2"])),
            ("Sinks and partial recompute, paired over documents", paired_table(numbers))),
        "frontier": captioned(
            ("Setup", report_frontier.setup_table(frontier)),
            ("Beside kvpress", report_frontier.kvpress_table(frontier))),
        "retrieval": captioned(
            ("Setup: each method is a row of the verdict table", report_retrieval.setup_table(retrieval)),
            ("Beside kvpress", report_retrieval.kvpress_table(retrieval)),
            ("Other seeds of random eviction (the paired tests and the figures use the first)",
             retrieval_seeds.seeds_table(retrieval))),
    }
    return details, tables
