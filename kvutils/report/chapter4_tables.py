"""Chapter 4's verdict tables, each verdict drawn by one rule of `kvutils.report.chapter4_verdicts` from
the per-prompt and per-document numbers the results hold: retrieval against the exact cache, the
frontier's methods against random eviction, and Kendall's τ with ties by construction counted once."""

from __future__ import annotations

import pandas as pd

from kvutils.report.chapter4_verdicts import (
    RetrievalVerdict,
    SignVerdict,
    retrieval_verdict,
    sign_verdict,
    tau_once,
)
from kvutils.report.findings import FORMAT
from kvutils.report.frontier import label, method
from kvutils.report.retrieval import haystacks, short
from kvutils.report.tables import PageTable, page_table

REGIMES = (("agnostic", "question after"), ("aware", "question inside"))


def _num(x) -> str:
    return FORMAT.number(x).replace("\\", "")


def _interval(lo: float, hi: float) -> str:
    return f"[{_num(lo)}, {_num(hi)}]"


def retrieval_verdicts(r: dict, regime: str) -> dict[str, RetrievalVerdict]:
    """{method label: its verdict against the exact cache} in one regime of one haystack (gated prompts)."""
    exact = r["exact"]["per_prompt"]
    out = {}
    for lab, entry in r["ops"].items():
        e = entry[regime]
        built = len(e.get("construction_losses", {}).get("prompts", []))
        out[lab] = retrieval_verdict([exact[i] for i in e["prompts"]], e["per_prompt"], built=built)
    return out


def judged(retrieval: dict):
    """(model, haystack, its result) for every haystack on which the exact cache passed the gate."""
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            if any(r["gate"].values()) and r["ops"]:
                yield model, hay, r


def _cell(v: RetrievalVerdict) -> tuple[str, str, str]:
    return (
        f"{v.keys} / {v.n} (exact {v.exact_keys}); p = {v.p:.2g}",
        f"{_num(v.shift)} {_interval(*v.interval)}",
        f"{v.mark} {v.words}",
    )


def retrieval_table(retrieval: dict) -> PageTable:
    """Per model, haystack and method, in both regimes: keys retrieved (McNemar's p against the exact
    cache), the mean shift of the key's log-probability (nats, 95 % interval) and the verdict."""
    rows = []
    for model, hay, r in judged(retrieval):
        verdicts = {regime: retrieval_verdicts(r, regime) for regime, _ in REGIMES}
        for lab in r["ops"]:
            row = {"method": short(lab), "model, text": f"{model}, {hay}"}
            for regime, words in REGIMES:
                keys, shift, verdict = _cell(verdicts[regime][lab])
                row.update(
                    {f"keys, {words}": keys, f"log p shift, {words}": shift, f"verdict, {words}": verdict}
                )
            rows.append(row)
    table = pd.DataFrame(rows)
    return page_table(table.set_index("method") if rows else table)


def random_baseline(run: dict, level: str) -> str | None:
    return next(
        (s for s, r in run["ops"].items() if str(r.get("level")) == level and method(s) == "random"), None
    )


def frontier_verdicts(run: dict) -> list[tuple[str, str, SignVerdict | None, str]]:
    """(level, spec, its per-document KL against random's at that level, the tie by construction it
    is part of, or "") for every method of a budget level."""
    ties = {t["a"]: t for t in run.get("construction_ties", []) if t["b"] is not None}
    out = []
    for level in run["levels"]:
        base = random_baseline(run, level)
        for spec, r in run["ops"].items():
            if str(r.get("level")) != level or spec == base:
                continue
            test = sign_verdict(r["per_doc_kl"], run["ops"][base]["per_doc_kl"]) if base else None
            out.append((level, spec, test, _tie(run, level, spec, ties.get(spec))))
    return out


def _tie(run: dict, level: str, spec: str, tie: dict | None) -> str:
    """The method this one equals by construction, with why; else one it scored identically to on
    every document with no construction to explain it; else ""."""
    if tie:
        return f"= {label(tie['b'])}: {tie['why']}"
    kl = run["ops"][spec]["per_doc_kl"]
    twin = next(
        (
            s
            for s, r in run["ops"].items()
            if s != spec
            and str(r.get("level")) == level
            and r["per_doc_kl"] == kl
            and not any(t["a"] == s and t["b"] == spec for t in run.get("construction_ties", []))
        ),
        None,
    )
    return f"scored as {label(twin)} on all {len(kl)} documents; no construction explains it" if twin else ""


SIGN_WORDS = {"a<b": "✓ below random", "a>b": "✗ above random", "identical": "= identical to random"}


def frontier_verdict_table(frontier: dict) -> PageTable:
    """Per model, level and method: mean KL, documents below and above random eviction, the median
    difference with its distribution-free 95 % interval, and the verdict that interval gives."""
    rows = []
    for model, run in frontier.items():
        for level, spec, t, tie in frontier_verdicts(run):
            row = {
                "method": label(spec),
                "model": model,
                "evicts": level,
                "mean KL (nats)": _num(run["ops"][spec]["mean_kl"]),
            }
            if t is not None:
                ci = _interval(*t.interval) if t.interval else "none at this n"
                row.update(
                    {
                        "documents below / above random": f"{t.lower} / {t.higher} of {t.n}",
                        "median KL difference [95 % CI]": f"{_num(t.median)} {ci}",
                        "verdict": SIGN_WORDS.get(t.verdict, f"? {t.verdict}"),
                    }
                )
            row["identical by construction"] = tie or "—"
            rows.append(row)
    table = pd.DataFrame(rows)
    return page_table(table.set_index("method") if rows else table, short={})


def tau_rows(retrieval: dict, frontier: dict) -> list[dict]:
    """Per model and level: Kendall's τ (mean KL against keys retrieved) over the methods counted once,
    its 95 % bootstrap interval, and what it says."""
    rows = []
    for model, result in retrieval.items():
        levels, dropped = tau_once((frontier or {}).get(model), result)
        for level, v in levels.items():
            lo, hi = v["ci95"] if v["ci95"] else (float("nan"), float("nan"))
            says = (
                "KL predicts retrieval"
                if v["predicts"]
                else "the rankings disagree"
                if v["ci95"] and lo > 0
                else "no detectable agreement"
            )
            twins = [f"{short(a)} = {short(b)}" for a, b in dropped.items() if a.endswith(f"@{level}")]
            rows.append(
                {
                    "model": model,
                    "evicts": level,
                    "methods": len(v["methods"]),
                    "τ [95 % CI]": f"{v['tau']:+.2f} [{lo:+.2f}, {hi:+.2f}]",
                    "verdict": says,
                    "counted once": ", ".join(twins) or "—",
                    "n": f"{v['n_documents']} documents, {v['n_prompts']} prompts",
                }
            )
    return rows


def tau_table(retrieval: dict, frontier: dict) -> PageTable:
    table = pd.DataFrame(tau_rows(retrieval, frontier))
    return page_table(table.set_index("model") if len(table) else table)
