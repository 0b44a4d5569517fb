"""Chapter 4's verdict rules on constructed data: the retrieval margin, one procedure per comparison
(the verdict is the interval shown), and a method identical by construction counted once in τ."""

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from kvutils.core import compare
from kvutils.report import chapter4_verdicts as rules
from kvutils.report.chapter4_verdicts import LOGPROB_MARGIN, median_interval, retrieval_verdict, sign_verdict


def _records(correct, logprob):
    return [{"correct": c, "key_logprob": lp} for c, lp in zip(correct, logprob)]


EXACT = _records([True] * 24, np.linspace(-0.6, -0.3, 24))


def _shifted(shifts, correct=None):
    return _records(correct or [True] * 24, [e["key_logprob"] + s for e, s in zip(EXACT, shifts)])


def test_a_shift_within_the_margin_reads_small_never_fewer_keys():
    """Every key still retrieved, the log-probability detectably lower but by less than the margin
    (Gemma's bf16 cache: −0.0017 nats): "small shift", with the shift it measured."""
    v = retrieval_verdict(EXACT, _shifted(np.full(24, -0.002) + np.linspace(-1e-4, 1e-4, 24)))
    assert (v.mark, v.words) == (rules.SMALL, "small shift") and v.keys == v.exact_keys == 24
    assert v.interval[1] < 0 < v.interval[0] + LOGPROB_MARGIN and v.shift == pytest.approx(-0.002)


def test_a_drop_beyond_the_margin_is_a_loss_though_every_key_is_retrieved():
    v = retrieval_verdict(EXACT, _shifted(np.full(24, -0.5) + np.linspace(-0.05, 0.05, 24)))
    assert (v.mark, v.words) == (rules.LOSES, "lower key log-probability") and v.keys == 24
    assert v.interval[1] < -LOGPROB_MARGIN


def test_fewer_keys_is_mcnemars_verdict_and_no_change_is_no_loss():
    wrong = [i >= 10 for i in range(24)]  # 10 keys lost, none gained: McNemar p = 2/2^10
    v = retrieval_verdict(EXACT, _shifted(np.zeros(24), wrong))
    assert (v.mark, v.words, v.keys) == (rules.LOSES, "fewer keys", 14) and v.p == pytest.approx(2 / 2**10)
    same = retrieval_verdict(EXACT, _shifted(np.linspace(-0.01, 0.01, 24)))
    assert (same.mark, same.words) == (rules.KEEPS, "no detectable loss")


def test_a_mean_drop_past_the_margin_with_a_wide_interval_is_not_separated():
    shifts = np.tile([-1.4, 0.7], 12)  # mean −0.35, the interval reaching above −0.1
    v = retrieval_verdict(EXACT, _shifted(shifts))
    assert (
        v.mark == rules.UNSEPARATED
        and v.words == f"not separated from the {LOGPROB_MARGIN:g}-nat margin at n = 24"
    )
    assert v.interval[0] < -LOGPROB_MARGIN < v.interval[1]


def test_a_needle_gone_by_construction_is_marked_beside_the_test():
    v = retrieval_verdict(EXACT, _shifted(np.zeros(24)), built=3)
    assert v.mark == f"{rules.KEEPS} {rules.BUILT}" and v.words.endswith("needle gone on 3 prompts")
    with pytest.raises(ValueError, match="same prompts"):
        retrieval_verdict(EXACT, EXACT[:3])


def test_the_median_interval_is_made_of_order_statistics():
    x = np.arange(20.0)
    assert median_interval(x[:8]) == (0.0, 7.0)  # n = 8: the range, coverage 1 − 2/256
    assert median_interval(x) == (5.0, 14.0)  # n = 20: P(Bin(20, ½) ≤ 5) = 2.1 % ≤ 2.5 % < P(≤ 6)
    assert median_interval(x[:5]) is None  # below 6 units no 95 % interval exists


def test_one_procedure_the_verdict_is_the_interval_shown():
    """Gemma's SnapKV against random at 25 %: lower on 7 of 8 documents. The interval shown reaches
    above 0, so the verdict says not separated; on 8 of 8 it lies below 0 and the verdict says lower."""
    random_kl = np.full(8, 0.12)
    seven = sign_verdict([0.02] * 7 + [0.15], random_kl)
    assert (seven.lower, seven.higher) == (7, 1) and seven.verdict == "not separated at n = 8"
    assert seven.interval[0] < 0 < seven.interval[1] and not seven.separated
    eight = sign_verdict([0.02] * 8, random_kl)
    assert eight.verdict == compare.A_LOWER and eight.interval[1] < 0
    assert sign_verdict([0.5] * 5, [0.1] * 5).verdict == "not separated at n = 5"
    assert sign_verdict([0.1] * 8, [0.1] * 8).verdict == compare.IDENTICAL
    rng = np.random.default_rng(0)
    for _ in range(200):  # whatever the data: separated exactly where the interval excludes 0
        n = int(rng.integers(6, 30))
        t = sign_verdict(rng.normal(rng.normal(), 1, n), np.zeros(n))
        assert t.separated == (t.interval[0] > 0 or t.interval[1] < 0)


def test_the_frontier_runs_on_enough_documents_for_seven_in_eight_to_decide():
    """Issue 50: at n = 8 a method below random on 7 documents of 8 is not separated (above); the
    frontier runs on 16 documents (as Table 2), where the same share, 14 of 16, is a verdict."""
    from kvutils.studies.parameters import Chapter4Parameters

    n = Chapter4Parameters().frontier_docs
    assert n >= 16
    random_kl = np.full(n, 0.12)
    lower = n - n // 8  # 7 in 8
    t = sign_verdict([0.02] * lower + [0.15] * (n - lower), random_kl)
    assert t.verdict == compare.A_LOWER and t.interval[1] < 0


def test_identical_methods_are_left_out_after_the_first():
    kept, dropped = rules.deduplicated(
        ["snapkv@0.5", "adakv@0.5", "tova@0.5", "pyramidkv@0.5"],
        [("adakv@0.5", "snapkv@0.5"), ("pyramidkv@0.5", "adakv@0.5")],
    )
    assert kept == ["snapkv@0.5", "tova@0.5", "pyramidkv@0.5"] and dropped == {"adakv@0.5": "snapkv@0.5"}


SPECS = {
    "random:compression_ratio=0.5,seed=0": ("random@0.5", [0.3, 0.4, 0.35, 0.5]),
    "knorm:compression_ratio=0.5": ("knorm@0.5", [0.2, 0.3, 0.25, 0.2]),
    "snapkv:compression_ratio=0.5,window=64,kernel=5": ("snapkv@0.5", [0.05, 0.1, 0.08, 0.06]),
    "adakv:compression_ratio=0.5,window=64,kernel=5,safeguard=0.2": ("adakv@0.5", [0.05, 0.1, 0.08, 0.06]),
    "tova:compression_ratio=0.46875": ("tova@0.5", [0.1, 0.12, 0.11, 0.13]),
}


def _tau_inputs(ada_right):
    right = {
        "random@0.5": [0, 0, 1, 0],
        "knorm@0.5": [1, 0, 1, 0],
        "snapkv@0.5": [1, 1, 0, 1],
        "adakv@0.5": ada_right,
        "tova@0.5": [1, 1, 1, 0],
    }
    run = {
        "ops": {spec: {"level": 0.5, "per_doc_kl": kl} for spec, (_, kl) in SPECS.items()},
        "construction_ties": [
            {
                "a": "adakv:compression_ratio=0.5,window=64,kernel=5,safeguard=0.2",
                "b": "snapkv:compression_ratio=0.5,window=64,kernel=5",
                "why": "one KV head",
            }
        ],
    }
    ops = {
        lab: {"aware": {"per_prompt": [{"correct": bool(c)} for c in right[lab]]}}
        for lab, _ in SPECS.values()
    }
    return run, {"pydoc": {"ops": ops}, "kl_vs_retrieval": {}}


def test_a_method_identical_by_construction_counts_once_in_tau():
    from kvutils.studies.cache_approximations.retrieval import kendall

    run, result = _tau_inputs([1, 1, 0, 1])  # AdaKV retrieves what SnapKV retrieves, prompt by prompt
    levels, dropped = rules.tau_once(run, result)
    assert dropped == {"adakv@0.5": "snapkv@0.5"}
    once = levels["0.5"]
    assert "adakv@0.5" not in once["methods"] and len(once["methods"]) == 4
    labels = once["methods"]
    kl = [np.mean(next(k for lab, k in SPECS.values() if lab == m)) for m in labels]
    acc = [np.mean([x["correct"] for x in result["pydoc"]["ops"][m]["aware"]["per_prompt"]]) for m in labels]
    assert once["tau"] == pytest.approx(kendall(kl, acc))
    # a tie the data do not bear out (AdaKV retrieving otherwise) is not taken on trust: both count
    levels, dropped = rules.tau_once(*_tau_inputs([0, 1, 0, 1]))
    assert dropped == {} and len(levels["0.5"]["methods"]) == 5


def test_the_full_builds_page_says_what_its_tests_show():
    """On the full build's numbers: Gemma's AdaKV counts once in τ; the bf16 cache never reads as a
    loss; Gemma's SnapKV against random at 25 % (15 of 16 documents) is separated, its interval wholly
    below 0; the box holds at most 5 short findings."""
    from kvutils.report import chapter4_tables as tables
    from kvutils.report.chapter4_findings import chapter4_findings
    from kvutils.report.findings import FORMAT

    numbers = json.loads(
        gzip.decompress(
            (
                Path(__file__).parents[1] / "data" / "full_build" / "04_cache_approximations.json.gz"
            ).read_bytes()
        )
    )["numbers"]
    tau = {(r["model"], r["evicts"]): r for r in tables.tau_rows(numbers["retrieval"], numbers["frontier"])}
    assert tau[("gemma3-270m", "0.5")]["counted once"] == "AdaKV (evicts 50 %) = SnapKV (evicts 50 %)"
    assert tau[("gemma3-270m", "0.5")]["methods"] == 7 and tau[("smollm2-135m", "0.5")]["methods"] == 8
    # the scatter's panels carry the table's τ, over the same methods (AdaKV = SnapKV drawn once on Gemma)
    from kvutils.report.retrieval import kl_points

    points = kl_points(numbers["retrieval"], numbers["frontier"])
    for (model, level), row in tau.items():
        panel = points[(points["model"] == model) & (points["level"] == level)]
        assert len(panel) == row["methods"] and f"{panel['tau'].iloc[0]:+.2f}" == row["τ [95 % CI]"].split()[0]
    table = tables.retrieval_table(numbers["retrieval"])
    bf16 = table.loc["bfloat16 cache"]
    assert not bf16.filter(like="verdict").apply(lambda col: col.str.contains(rules.LOSES)).any().any()
    gemma = numbers["frontier"]["gemma3-270m"]
    snap = next(
        t
        for level, spec, t, _ in tables.frontier_verdicts(gemma)
        if level == "0.25" and spec.startswith("snapkv:")
    )
    # at 8 documents (7 of 8 lower) the interval reached above 0; at 16 (issue 50) it lies wholly below
    assert (snap.lower, snap.n, snap.verdict) == (15, 16, "a<b")
    assert snap.interval[0] < snap.interval[1] < 0
    page = chapter4_findings(numbers)
    assert 1 <= len(page.box) <= 5
    assert all(len(FORMAT.sentence(f).split()) <= 30 for f in page.box)
    assert page.answer.claim == "Speed for bytes; compressing the cache is not free."
    assert {f.key for f in page.box} == {"decode", "bytes", "table2", "retrieval", "tau"}
    # τ separated from 0 nowhere in KL's favour (once against it): not "does not predict", which no test shows
    tau_found = next(f for f in page.box if f.key == "tau")
    assert tau_found.claim == "Mean KL did not detectably predict retrieval."
    assert [tau_found.value(k) for k in ("predicts", "disagree", "open")] == [0, 1, 3]
    # without retrieval or frontier the page says so, rather than counting n/a
    bare = chapter4_findings({**numbers, "retrieval": {}, "frontier": {}})
    assert FORMAT.sentence(bare.answer).endswith("no retrieval test was judged in this run.")
    assert {f.key for f in bare.box} == {"decode", "bytes", "table2"}
