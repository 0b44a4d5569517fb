"""The acceptance test decides: each metric's 95 % interval over documents, a verdict per operation
against the near-exact line (near-exact / costly / not separated at n), and `--task passkey`'s n,
Clopper-Pearson intervals and paired verdict against the exact cache (kvutils.cache.accept_report,
kvutils.cache.accept_retrieval). Real runs on tiny-llama; each verdict branch on constructed inputs."""
import json
import math

import pytest
from conftest import load_cached
from scipy import stats

from kvutils.cache import accept as acceptance
from kvutils.cache import accept_report as report
from kvutils.cache import accept_retrieval as retrieval
from kvutils.core import compare, data
from kvutils.core.near_exact import NEAR_EXACT_PCT
from kvutils.studies.parameters import ConclusionsParameters

PREFILL, DECODE = 20, 12
OPS = ["quantize_naive:bits=2", "window:size=10,sinks=2"]


@pytest.fixture(scope="module")
def run():
    """tiny-llama on 6 documents: an operation that changes the distributions and one that evicts."""
    texts = [d.text for d in data.load_corpus("pydoc")[:6]]
    loaded = load_cached("tiny-llama", "float32")
    return acceptance.accept_many(loaded, OPS, texts, prefill=PREFILL, decode=DECODE, progress=False)


def test_the_near_exact_line_is_the_books():
    assert NEAR_EXACT_PCT == ConclusionsParameters().near_exact_pct == compare.NEAR_EXACT_PCT == 99.0


def test_every_metric_has_an_ordered_interval_over_the_documents(run):
    """KL, top-1 and perplexity each carry a 95 % interval over the 6 documents that holds the
    reported value; KL's and top-1's are compare.mean_interval of the per-document numbers, the
    perplexity's that of the per-document log-perplexity, exponentiated."""
    decided = report.decide(run)
    lo, hi = decided["exact_perplexity_ci95"]
    assert lo <= run["exact_perplexity"] <= hi and lo < hi
    for spec, o in decided["ops"].items():
        docs = o["per_document"]
        assert len(docs) == 6
        for metric in ("mean_kl", "top1_agreement_pct", "perplexity"):
            lo, hi = o["ci95"][metric]
            assert lo <= o[metric] * (1 + 1e-12) and o[metric] <= hi * (1 + 1e-12), (spec, metric, lo, o[metric], hi)
            assert lo < hi, (spec, metric)  # the documents differ: a real spread, not a point
        assert o["ci95"]["mean_kl"] == list(compare.mean_interval([d["mean_kl"] for d in docs]))
        assert o["ci95"]["mean_kl"][0] > 0  # both operations change the distributions on every document
        log_ci = compare.mean_interval([math.log(d["perplexity"]) for d in docs])
        assert o["ci95"]["perplexity"] == pytest.approx([math.exp(x) for x in log_ci], rel=1e-12)
        assert o["perplexity"] == pytest.approx(math.exp(sum(math.log(d["perplexity"]) for d in docs) / 6), rel=1e-9)
        ppl = compare.Paired.from_dict(o["perplexity_vs_exact"])
        assert ppl.n == 6 and ppl.ci95[0] <= ppl.effect <= ppl.ci95[1]
        test = compare.Paired.from_dict(o["verdict"]["test"])  # the verdict tests the same top-1 interval
        assert [NEAR_EXACT_PCT + x for x in test.ci95] == pytest.approx(o["ci95"]["top1_agreement_pct"], abs=1e-9)


def test_one_document_has_no_interval_and_says_so():
    one = [{"mean_kl": 0.1, "top1_agreement_pct": 90.0, "perplexity": 12.0}]
    assert report.intervals(one) == {"mean_kl": None, "top1_agreement_pct": None, "perplexity": None}
    test = report.threshold_test("op", [90.0], 99.0)
    assert report.verdict_of(test) == "not separated at n = 1"
    assert "no interval" in report.verdict_line("op", 90.0, test, 99.0)


# each branch of the verdict, on per-document top-1 agreements (%) against the 99 % line
BRANCHES = {
    "near-exact": ([99.5, 99.8, 100.0, 99.9, 99.7, 100.0, 99.6], "wholly above the 99 % line"),
    "costly": ([90.0, 95.0, 92.0, 96.0, 94.0, 93.0], "wholly below the 99 % line"),
    "not separated at n = 8": ([98.0, 100.0, 99.5, 98.5, 100.0, 98.2, 99.9, 98.8], "straddles the 99 % line"),
    "not separated at n = 3": ([100.0, 100.0, 100.0], "whatever the data"),  # too few documents for any verdict
}


@pytest.mark.parametrize("expected", list(BRANCHES))
def test_each_verdict_branch(expected):
    top1, said = BRANCHES[expected]
    test = report.threshold_test("op", top1, NEAR_EXACT_PCT)
    assert report.verdict_of(test) == expected
    line = report.verdict_line("op", sum(top1) / len(top1), test, NEAR_EXACT_PCT)
    assert line.startswith(f"op: {expected}: top-1 ") and said in line and f"n = {len(top1)} documents" in line
    lo, hi = (NEAR_EXACT_PCT + x for x in test.ci95)
    if expected == "near-exact":
        assert lo > NEAR_EXACT_PCT
    elif expected == "costly":
        assert hi < NEAR_EXACT_PCT
    elif len(top1) >= 6:
        assert lo < NEAR_EXACT_PCT < hi


def test_the_threshold_moves_the_verdict():
    """The straddling operation is near-exact against a 95 % line and costly against 100 %."""
    top1 = BRANCHES["not separated at n = 8"][0]
    assert report.verdict_of(report.threshold_test("op", top1, 95.0)) == "near-exact"
    assert report.verdict_of(report.threshold_test("op", top1, 100.0)) == "costly"


def test_decide_gives_each_operation_of_a_constructed_run_its_verdict():
    """decide() on a run whose per-document numbers are made up: one operation per branch."""
    def doc(top1):
        return {"mean_kl": 0.01 * (100 - top1), "top1_agreement_pct": top1, "perplexity": 10.0 + (100 - top1) / 10}
    ops = {name: {"top1_agreement_pct": sum(t) / len(t), "per_document": [doc(x) for x in t]}
           for name, (t, _) in BRANCHES.items() if len(t) == 6}
    ops["good"] = {"top1_agreement_pct": 99.9, "per_document": [doc(x) for x in [99.9, 99.8, 100, 100, 99.7, 99.9]]}
    ops["open"] = {"top1_agreement_pct": 99.0, "per_document": [doc(x) for x in [98, 100, 99.5, 98.5, 100, 98]]}
    run = {"exact_perplexity_per_document": [10.0] * 6, "ops": ops}
    verdicts = {spec: o["verdict"]["verdict"] for spec, o in report.decide(run)["ops"].items()}
    assert verdicts == {"costly": "costly", "good": "near-exact", "open": "not separated at n = 6"}


def test_the_cli_prints_intervals_units_and_verdicts_and_writes_them(tmp_path, capsys):
    out = tmp_path / "accept.json"
    argv = ["--model", "tiny-llama", "--docs", "pydoc", "--n-docs", "6", "--prefill", str(PREFILL), "--decode",
            str(DECODE), "--threshold", "50", "--out", str(out)]
    for op in OPS:
        argv += ["--op", op]
    assert acceptance.main(argv) == 0
    printed = capsys.readouterr().out
    for header in report.HEADERS:
        assert header in printed
    written = json.loads(out.read_text())
    assert written["threshold_pct"] == 50.0 and written["units"]["mean_kl"] == "nats per token"
    assert "verdict against the near-exact line, 50 % top-1 agreement" in printed
    for spec, o in written["ops"].items():
        assert o["verdict"]["line"] in printed and o["verdict"]["threshold_pct"] == 50.0
        assert o["verdict"]["verdict"] in ("near-exact", "costly", "not separated at n = 6")
        assert all(len(o["ci95"][m]) == 2 for m in ("mean_kl", "top1_agreement_pct", "perplexity"))
        top1 = [d["top1_agreement_pct"] for d in o["per_document"]]
        assert o["verdict"]["verdict"] == report.verdict_of(report.threshold_test(spec, top1, 50.0))


@pytest.mark.parametrize("value", ["0", "100.5", "nan", "-3"])
def test_a_bad_threshold_is_refused_before_any_model_loads(value, capsys, no_model_loads):
    with pytest.raises(SystemExit) as exit_:
        acceptance.main(["--model", "tiny-llama", "--docs", "pydoc", "--op", "exact", "--threshold", value])
    assert exit_.value.code == 2
    assert "--threshold: a top-1 agreement in %, 0 < PCT ≤ 100" in capsys.readouterr().err


# --------------------------------------------------------------------------- passkey

def _paired(lost: int, gained: int, both: int, neither: int) -> tuple[list[bool], list[bool]]:
    """(op, exact) right/wrong per prompt with these counts."""
    op = [False] * lost + [True] * gained + [True] * both + [False] * neither
    exact = [True] * lost + [False] * gained + [True] * both + [False] * neither
    return op, exact


@pytest.mark.parametrize("counts, expected", [
    ((8, 0, 4, 0), "loses keys"),
    ((0, 7, 2, 3), "finds more keys than exact"),
    ((0, 0, 9, 3), "same as exact"),
    ((2, 1, 7, 2), "not separated at n = 12"),
    ((3, 0, 1, 0), "not separated at n = 4"),  # every discordant prompt one way, but 3 cannot reach p < 0.05
])
def test_each_passkey_verdict_against_the_exact_cache(counts, expected):
    op, exact = _paired(*counts)
    x = retrieval.against_exact("op", "agnostic", op, exact)
    n = len(op)
    assert (x["n"], x["found"], x["verdict"]) == (n, sum(op), expected)
    assert x["mcnemar"]["lost"] == counts[0] and x["mcnemar"]["gained"] == counts[1]
    assert x["accuracy_ci95"] == list(compare.proportion_interval(sum(op), n))
    assert x["accuracy_ci95"][0] <= x["accuracy"] <= x["accuracy_ci95"][1]
    discordant = counts[0] + counts[1]
    mcnemar = 1.0 if not discordant else stats.binomtest(counts[1], discordant).pvalue
    assert x["mcnemar"]["p"] == pytest.approx(mcnemar)
    assert x["line"].startswith(f"op, agnostic: {expected}: {sum(op)} of {n} keys found")


def test_a_passkey_test_the_exact_cache_fails_says_it_shows_nothing():
    x = retrieval.against_exact("op", "aware", *_paired(0, 0, 0, 6))
    assert x["verdict"] == "same as exact" and "the exact cache finds no key here" in x["line"]


def test_the_estimate_grows_with_prompts_contexts_and_operations():
    base = retrieval.estimate_seconds([1024], 24, 1, 2)
    assert base == pytest.approx(24 * (retrieval.EXACT_SECONDS_PER_1K + 2 * retrieval.OP_SECONDS_PER_1K))
    assert retrieval.estimate_seconds([1024, 2048], 24, 1, 2) == pytest.approx(3 * base)
    assert retrieval.estimate_seconds([1024], 24, 3, 2) > base


def test_passkey_gives_n_intervals_a_paired_verdict_and_explains_the_regimes(tmp_path, capsys):
    out = tmp_path / "passkey.json"
    argv = ["--task", "passkey", "--model", "tiny-llama", "--haystack", "filler", "--context", "128",
            "--n-prompts", "6", "--op", "window:size=32,sinks=4", "--out", str(out)]
    assert acceptance.main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err.startswith("estimate: ") and "for 6 prompts" in captured.err
    printed = captured.out
    assert "n = 6 prompts" in printed and "accuracy, % [95 % CI]" in printed and "held, KiB (mean)" in printed
    assert "agnostic: the cache compressed before the question arrives (query-agnostic: prompt caching" in printed
    assert "aware: the cache compressed with the question in the prefill (query-aware" in printed
    written = json.loads(out.read_text())
    exact = [r["correct"] for r in written["exact"]["per_prompt"]]
    assert written["exact"]["n"] == 6 == len(exact)
    assert written["exact"]["accuracy_ci95"] == list(compare.proportion_interval(sum(exact), 6))
    for regime in ("agnostic", "aware"):
        x = written["ops"]["window:size=32,sinks=4,reindex=false"][regime]
        found = [r["correct"] for r in x["per_prompt"]]
        assert x["n"] == 6 and x["found"] == sum(found)
        assert x["accuracy_ci95"] == list(compare.proportion_interval(sum(found), 6))
        test = compare.paired_binary(found, exact, f"window:size=32,sinks=4,reindex=false ({regime})", "exact",
                                     unit="prompts")
        assert x["vs_exact"] == json.loads(json.dumps(test.to_dict()))
        assert x["line"] in printed and x["verdict"] in printed
