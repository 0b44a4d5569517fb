"""Chapter 5's verdicts cluster by document (issue 50, item 3), on constructed data: a gap that
McNemar over examples calls detectable is not a verdict when it sits in two documents; the stale
cache is a bias shift only where its AUC stays above chance; the findings are data."""

import gzip
import json
import re

import pytest

from kvutils.book import page as book_page
from kvutils.core import compare
from kvutils.core.paths import REPO_ROOT
from kvutils.report import switch_findings as sf
from kvutils.report.findings import FORMAT
from kvutils.studies.qwen3_switch.verdicts import accuracy_pair, auc


def _docs(n_docs: int, per_doc: int) -> list[str]:
    return [f"doc{d}" for d in range(n_docs) for _ in range(per_doc)]


def test_document_shares_follow_the_order_of_the_documents():
    assert sf.document_shares([1, 0, 1, 1], ["b", "b", "a", "a"]) == [0.5, 1.0]
    with pytest.raises(ValueError, match="3 answers but 4 document labels"):
        sf.document_shares([1, 0, 1], ["a", "a", "b", "b"])


def test_a_gap_in_two_documents_is_detectable_per_example_but_not_by_document():
    docs = _docs(8, 16)
    a = [1] * 128
    b = [0] * 32 + [1] * 96  # b misses every example of doc0 and doc1 only
    assert (
        accuracy_pair({"right_per_example": a}, {"right_per_example": b}, "a", "b").verdict
        == compare.A_HIGHER
    )
    p = sf.by_document(a, b, docs, "a", "b")
    assert (p.n, p.unit, p.verdict) == (8, "documents", compare.NO_DIFFERENCE)
    assert p.effect == pytest.approx(0.25) and p.p == pytest.approx(0.5)  # 2 of 2 non-zero documents


def test_a_gap_in_every_document_is_a_verdict_by_document():
    docs = _docs(8, 16)
    a = ([1] * 14 + [0] * 2) * 8
    b = ([1] * 10 + [0] * 6) * 8
    p = sf.by_document(a, b, docs, "a", "b")
    assert p.verdict == compare.A_HIGHER and p.p == pytest.approx(2 * 0.5**8)
    assert p.ci95 == (pytest.approx(0.25), pytest.approx(0.25)) and p.effect == pytest.approx(0.25)


def test_too_few_documents_can_give_no_verdict():
    p = sf.by_document([1] * 20, [0] * 20, _docs(4, 5))
    assert p.verdict == compare.CANNOT  # 4 documents: a sign test cannot reach p < 0.05


def _held(right: list[int], logodds: list[float]) -> dict:
    n = len(right)
    return {
        "right_per_example": right,
        "logodds_per_example": logodds,
        "accuracy_pct": 100 * sum(right) / n,
        "n": n,
        "auc": None,
    }


def _run(stale_logodds: list[float], n_docs: int = 8, per_doc: int = 8) -> dict:
    """One model's chapter-5 results, constructed: labels alternate; the tail patch ranks and answers
    well; the stale cache's log-odds are `stale_logodds` (right answer minus the other)."""
    n = n_docs * per_doc
    labels = [i % 2 for i in range(n)]
    patch_odds = [2.0 if i % 8 else -1.0 for i in range(n)]
    held = {
        "tail12": {
            "tail_patch": _held([int(x > 0) for x in patch_odds], patch_odds),
            "stale": _held([int(x > 0) for x in stale_logodds], stale_logodds),
        }
    }
    for h in held["tail12"].values():
        h["auc"] = auc(h["logodds_per_example"], labels)
    return {
        "k_values": [12],
        "switch": {"heldout": held, "heldout_examples": {"label": labels, "group": _docs(n_docs, per_doc)}},
    }


def test_the_stale_cache_is_a_bias_shift_only_where_its_auc_stays_high():
    n = 64
    labels = [i % 2 for i in range(n)]
    # one answer throughout (label 0's), but label-0 examples score higher: the ranking survives
    shifted = [(3.0 if y == 0 else -1.0) for y in labels]
    f = sf.stale_finding(_run(shifted))
    assert f.claim == sf.STALE_CLAIM[compare.A_HIGHER]
    assert f.value("acc") == 50 and f.value("auc") == 1.0 and f.value("first") == n
    assert "AUC" in FORMAT.sentence(f) and f.test.n == 8
    assert f.test.name == f"{sf.DOCUMENT_TEST}, tail patch − stale"
    # the same accuracy with no ranking left: a loss, not a bias shift
    blind = [(1.0 if y == 0 else -1.0) * (1 if (i // 2) % 2 else -1) for i, y in enumerate(labels)]
    lost = sf.stale_finding(_run(blind))
    assert lost.claim == sf.STALE_RANKS_LOST


def _full_build() -> dict:
    return json.loads(
        gzip.open(REPO_ROOT / "tests" / "data" / "full_build" / "05_qwen3_switch.json.gz").read()
    )


def test_the_full_build_knee_is_tested_over_its_documents():
    """The full build holds 128 held-out examples from 8 documents: the knee's test runs over the 8."""
    record = _full_build()
    r = next(iter(record["numbers"].values()))
    knee = sf.knee_finding(r)
    assert knee.test.name.startswith(sf.DOCUMENT_TEST) and knee.test.n == len(
        set(r["switch"]["heldout_examples"]["group"])
    )
    assert knee.test.n < r["n_heldout_examples"]
    page = sf.chapter5_findings(record["numbers"], record["parameters"])
    assert 1 <= len(page.box) <= 5 and all(f.test is not None for f in page.box)
    assert {f.key for f in page.box} == {"exact", "activated", "knee", "stale", "cost"}
    stale = next(f for f in page.box if f.key == "stale")
    assert stale.value("auc") == r["switch"]["heldout"]["tail12"]["stale"]["auc"]  # AUC beside accuracy


def test_chapter5_keeps_its_budget_and_opens_with_its_box_on_the_full_build():
    record = _full_build()
    page = sf.chapter5_findings(record["numbers"], record["parameters"])
    nb = json.loads((REPO_ROOT / "notebooks" / "05_qwen3_switch.ipynb").read_text())
    for cell in nb["cells"]:
        cell["source"] = "".join(cell["source"])
        shown = (
            page.show_box()
            if "display(pending()" in cell["source"]
            else page.show(*m.groups())
            if (m := re.match(r'page\.show\("(\w+)", "([^"]+)"\)', cell["source"]))
            else None
        )
        if shown is not None:
            cell["outputs"] = [{"output_type": "display_data", "data": {"text/html": shown._repr_html_()}}]
    measured = book_page.measure(nb)
    assert measured["words"] <= 2500 and measured["median"] <= 22 and measured["longest"] <= 50, measured
    shown_cells = [c for c in nb["cells"] if c["cell_type"] == "markdown" or c.get("outputs")]
    assert shown_cells[0]["source"].startswith("# ")
    assert "What this chapter finds" in shown_cells[1]["outputs"][0]["data"]["text/html"]
    assert not any("{glue" in c["source"] for c in nb["cells"])
    assert sum('page.show("' in c["source"] for c in nb["cells"]) == len(page.sections)
