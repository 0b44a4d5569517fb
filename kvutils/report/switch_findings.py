"""Chapter 5's findings as data (`kvutils.report.findings`): the answer, the box and each section's
point, from the results of `kvutils.studies.qwen3_switch`.

The held-out examples come from few documents (the default build: 128 examples from 8 documents), and
passages of one document are not independent draws. So every verdict here is clustered by document
(`by_document`): each document's accuracy under a and under b, an exact sign test over the documents
and a bootstrap interval that resamples whole documents. The per-example tests of the study
(McNemar) stay in the evidence, beside them. Every adapter was trained once (one seed per k).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvutils.core import compare
from kvutils.lora.switching import nan_max
from kvutils.report.findings import Finding, PageFindings, Section, Test
from kvutils.report.switch_evidence import chapter5_evidence
from kvutils.studies.qwen3_switch.study import TOLERANCE
from kvutils.studies.qwen3_switch.verdicts import auc_vs_chance, label0_scores

DOCUMENT_TEST = "sign test over documents"  # the test of every verdict on this page (`by_document`)
UNIT = "documents"


def document_shares(right: Sequence[float], documents: Sequence[str]) -> list[float]:
    """Each document's share of right answers, documents in their order of first appearance."""
    if len(right) != len(documents):
        raise ValueError(f"document_shares: {len(right)} answers but {len(documents)} document labels")
    values, docs = np.asarray(right, dtype=float), np.asarray(documents)
    return [float(values[docs == d].mean()) for d in dict.fromkeys(documents)]


def by_document(
    right_a: Sequence[float],
    right_b: Sequence[float],
    documents: Sequence[str],
    a_name: str = "a",
    b_name: str = "b",
) -> compare.Paired:
    """a against b on the same examples, clustered by document: per document, a's accuracy minus b's
    (0..1); `compare.paired` over the documents (exact sign test, bootstrap over documents)."""
    if len(right_a) != len(right_b):
        raise ValueError(f"by_document: {a_name} has {len(right_a)} answers, {b_name} {len(right_b)}")
    return compare.paired(
        document_shares(right_a, documents), document_shares(right_b, documents), a_name, b_name, UNIT
    )


def _documents(r: dict) -> list[str]:
    return r["switch"]["heldout_examples"]["group"]


def pair(r: dict, a: tuple[str, str], b: tuple[str, str], a_name: str, b_name: str) -> compare.Paired:
    """(adapter, policy) a against b on the held-out examples of one model, by document."""
    held = r["switch"]["heldout"]
    return by_document(
        held[a[0]][a[1]]["right_per_example"],
        held[b[0]][b[1]]["right_per_example"],
        _documents(r),
        a_name,
        b_name,
    )


def document_test(p: compare.Paired) -> Test:
    """The Test a finding shows: which difference, n documents, its interval in points, p."""
    interval = None if p.ci95 is None else (round(100 * p.ci95[0], 1), round(100 * p.ci95[1], 1))
    return Test(f"{DOCUMENT_TEST}, {p.a} − {p.b}", p.n, UNIT, interval, "points", p.p)


# what a by-document comparison says, by its verdict (the claim of a finding)
KNEE_CLAIM = {
    compare.A_HIGHER: "The deepest tail is detectably better, on one training run per k.",
    compare.A_LOWER: "The deepest tail is detectably worse, on one training run per k.",
}
KNEE_OPEN = "Deeper tails scored higher, but not detectably by document."
ACTIVATED_CLAIM = {
    compare.A_HIGHER: "The activated adapter needs no switch and scores higher.",
    compare.A_LOWER: "The activated adapter needs no switch but scores lower.",
}
ACTIVATED_OPEN = "The activated adapter needs no switch, at no detectable loss."
STALE_CLAIM = {
    compare.A_HIGHER: "The stale cache loses accuracy by a bias shift.",
    compare.A_LOWER: "The stale cache scored higher than the tail patch.",
}  # tail patch − stale
STALE_OPEN = "The stale cache shows no detectable loss by document."
STALE_RANKS_LOST = "The stale cache loses accuracy and its ranking."  # a loss whose AUC is not above chance


VERDICT_WORD = {
    compare.A_LOWER: "detectably below",
    compare.A_HIGHER: "detectably above",  # a against b
    compare.IDENTICAL: "identical answers",
    compare.NO_DIFFERENCE: "no detectable difference",
    compare.CANNOT: "too few documents for a verdict",
}


def _claim(p: compare.Paired, claims: dict[str, str], otherwise: str) -> str:
    return claims.get(p.verdict, otherwise)


def knee_finding(r: dict) -> Finding:
    """The deepest tail trained against the shallowest, by document."""
    ks, held = r["k_values"], r["switch"]["heldout"]
    deep, shallow = max(ks), min(ks)
    p = pair(
        r, (f"tail{deep}", "tail_patch"), (f"tail{shallow}", "tail_patch"), f"k = {deep}", f"k = {shallow}"
    )
    return Finding(
        "knee",
        _claim(p, KNEE_CLAIM, KNEE_OPEN),
        "The k = {deep} tail scored {deep_acc} %, the k = {shallow} tail {shallow_acc} %.",
        (
            ("deep", deep),
            ("deep_acc", held[f"tail{deep}"]["tail_patch"]["accuracy_pct"]),
            ("shallow", shallow),
            ("shallow_acc", held[f"tail{shallow}"]["tail_patch"]["accuracy_pct"]),
        ),
        document_test(p),
    )


def knee_steps(r: dict) -> tuple[Finding, ...]:
    """Every smaller k against the best tail, by document (the study's knee is per example)."""
    best, held = r["knee"]["best_k"], r["switch"]["heldout"]
    out = []
    for k in (x for x in r["k_values"] if x != best):
        p = pair(r, (f"tail{best}", "tail_patch"), (f"tail{k}", "tail_patch"), f"k = {best}", f"k = {k}")
        out.append(
            Finding(
                f"knee_{k}",
                f"The best tail, k = {best}, against k = {k}, by document.",
                "{a} % against {b} % ({verdict}).",
                (
                    ("a", held[f"tail{best}"]["tail_patch"]["accuracy_pct"]),
                    ("b", held[f"tail{k}"]["tail_patch"]["accuracy_pct"]),
                    ("verdict", VERDICT_WORD.get(p.verdict, "not separated")),
                ),  # best − k
                document_test(p),
            )
        )
    return tuple(out)


def activated_finding(r: dict) -> Finding:
    k, held = max(r["k_values"]), r["switch"]["heldout"]
    act, patch = held[f"activated{k}"]["activated"], held[f"tail{k}"]["tail_patch"]
    p = pair(r, (f"activated{k}", "activated"), (f"tail{k}", "tail_patch"), "activated", "tail patch")
    return Finding(
        "activated",
        _claim(p, ACTIVATED_CLAIM, ACTIVATED_OPEN),
        "At k = {k} it scored {acc} % (AUC {auc}) on the base cache, against {patch} % for the tail patch.",
        (("k", k), ("acc", act["accuracy_pct"]), ("auc", act["auc"]), ("patch", patch["accuracy_pct"])),
        document_test(p),
    )


def stale_finding(r: dict) -> Finding:
    """Stale reuse against the tail patch at the deepest k: accuracy by document, AUC beside it, and
    how many examples it gives the first answer. A loss is called a bias shift only where the stale
    AUC stays above chance (per example, `auc_vs_chance`): the ranking survives, the threshold moved."""
    k, held = max(r["k_values"]), r["switch"]["heldout"]
    stale, patch = held[f"tail{k}"]["stale"], held[f"tail{k}"]["tail_patch"]
    labels = r["switch"]["heldout_examples"]["label"]
    first = int(sum(s > 0 for s in label0_scores(stale["logodds_per_example"], labels)))
    p = pair(r, (f"tail{k}", "tail_patch"), (f"tail{k}", "stale"), "tail patch", "stale")  # a − b > 0: a loss
    ranks = (
        auc_vs_chance(stale, labels, "stale").verdict == compare.A_HIGHER
    )  # a bias shift keeps the ranking
    claim = _claim(p, STALE_CLAIM, STALE_OPEN) if ranks or p.verdict != compare.A_HIGHER else STALE_RANKS_LOST
    return Finding(
        "stale",
        claim,
        "At k = {k} it scored {acc} % but AUC {auc}, against {patch} % and AUC {patch_auc}; "
        "it gave the first answer on {first} of {n} examples.",
        (
            ("k", k),
            ("acc", stale["accuracy_pct"]),
            ("auc", stale["auc"]),
            ("patch", patch["accuracy_pct"]),
            ("patch_auc", patch["auc"]),
            ("first", first),
            ("n", len(labels)),
        ),
        document_test(p),
    )


def exact_finding(r: dict, dtype: str) -> Finding:
    sc, layers, ks = r["switch"]["scores"], r["switch"]["cache_layers"], r["k_values"]
    logit = max(sc[f"tail{k}"]["tail_patch"]["max_abs_logit_diff"] for k in ks)
    kv = max(nan_max(layers[f"tail{k}"]["tail_patch"]) for k in ks)
    claim = (
        "The tail patch is exact."
        if logit <= TOLERANCE[dtype]
        else "The tail patch drifted past its tolerance."
    )
    return Finding(
        "exact",
        claim,
        "Largest logit difference from a full recompute {logit}; largest K/V difference {kv}, over k = {ks}.",
        (("logit", logit), ("kv", kv), ("ks", list(ks))),
        Test(f"every policy against its reference, {dtype}", r["switch"]["n_examples"], "examples"),
    )


def cost_finding(r: dict, repeats: int) -> Finding:
    k, L, cost = max(r["k_values"]), r["layers"], r["cost"]
    c = cost["per_k"][str(k)]
    return Finding(
        "cost",
        "The tail patch costs about k/L of a prefill.",
        "At k = {k} of L = {L} it took {time} of a recompute's time and {flops} of its FLOPs, "
        "plus {kib} KiB per token kept.",
        (
            ("k", k),
            ("L", L),
            ("time", round(c["tail_time_fraction"], 3)),
            ("flops", round(c["tail_flops_fraction"], 3)),
            ("kib", cost["boundary_bytes_per_token"] / 1024),
        ),
        Test(f"median of timed repeats, {cost['prefix_tokens']}-token prefix", repeats, "repeats"),
    )


def learned_finding(r: dict) -> Finding:
    k, held = max(r["k_values"]), r["switch"]["heldout"]
    p = pair(r, (f"tail{k}", "tail_patch"), ("base", "zero_shot"), f"k = {k}", "base")
    claim = (
        "The adapter learned the task."
        if p.verdict == compare.A_HIGHER
        else "The adapter's gain is not detectable."
    )
    return Finding(
        "learned",
        claim,
        "The k = {k} tail scored {acc} % on held-out documents; the base model {base} %.",
        (
            ("k", k),
            ("acc", held[f"tail{k}"]["tail_patch"]["accuracy_pct"]),
            ("base", held["base"]["zero_shot"]["accuracy_pct"]),
        ),
        document_test(p),
    )


def patching_finding(r: dict) -> Finding:
    pm = r["patching"]
    flips = pm["flips"][-1][-1]
    return Finding(
        "patching",
        "The adapter reads its answer from what follows the shared prefix.",
        "Copying all of it, in every layer, flipped {flips} of {n} right answers; the shared prefix "
        "flipped none (largest K/V difference {prefix}).",
        (("flips", flips), ("n", pm["n_clean_right"]), ("prefix", pm["prefix_kv_max_diff"])),
        Test("pairs the clean adapter answers right", pm["n_clean_right"], "pairs"),
    )


def chapter5_findings(numbers: dict, parameters: dict) -> PageFindings:
    """Chapter 5's answer, box and sections, on the run's first model; the evidence of every model
    (`kvutils.report.switch_evidence`) stays in the sections' collapsed blocks."""
    model, r = next(iter(numbers.items()))
    exact, cost = exact_finding(r, parameters["dtype"]), cost_finding(r, parameters["timing_repeats"])
    knee, activated, stale = knee_finding(r), activated_finding(r), stale_finding(r)
    answer = Finding(
        "answer",
        "Below the tail, yes." if exact.claim == "The tail patch is exact." else "Not here.",
        "On {model}, a LoRA tail leaves the first L − k layers' cache exact, so the switch recomputes "
        "k of L layers; an activated adapter reuses the whole cache.",
        (("model", model),),
    )
    texts, tables = chapter5_evidence(numbers, parameters)
    points = {"training": (learned_finding(r), ()), "quality": (knee, knee_steps(r)),
              "switch": (exact, (stale, activated)), "cost": (cost, ()),
              "patching": (patching_finding(r), ())}
    sections = {key: Section(point, evidence, texts[key], tables.get(key, ()))
                for key, (point, evidence) in points.items()}
    return PageFindings(answer, (exact, activated, knee, stale, cost), sections)
