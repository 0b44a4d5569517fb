"""Findings are data (kvutils/report/findings.py): one formatter renders a finding for the box, a
table row and a displayed output; chapters 1-3 build their findings from the results, Holm judges
every best depth, and the pages rendered from the full build's numbers keep DESIGN §7's budgets."""
import copy
import gzip
import json
import re

import pytest

from kvutils.book import page as book_page
from kvutils.core import compare
from kvutils.core.paths import REPO_ROOT
from kvutils.report import bert_contrast, cache_exactness, conclusions, sense_probes
from kvutils.report.findings import FORMAT, Finding, PageFindings, Section, Test

FULL = REPO_ROOT / "tests" / "data" / "full_build"


def _numbers(name: str) -> dict:
    return json.loads(gzip.open(FULL / f"{name}.json.gz").read())["numbers"]


def test_formatter_decides_every_number_once():
    assert [FORMAT.number(v) for v in (24, 13860, 0.0, 2.57905e-13, 96.875, 100.0, None, "a_b")] == [
        "24", "13,860", "0", "2.58e-13", "96.9", "100", "n/a", "a\\_b"]
    f = Finding("k", "The cache is *exact*.", "{same} of {n} matched; largest {d}.", (("same", 24), ("n", 24),
                                                                                     ("d", 5.76973e-05)),
                Test("exact match", 24, "prompts", (90.6, 100.0), "%", 0.0012))
    assert FORMAT.bullet(f) == ("**The cache is \\*exact\\*.** 24 of 24 matched; largest 5.77e-05. "
                                "(exact match, n = 24 prompts, 95 % CI 90.6–100 %, p = 0.0012)")
    assert FORMAT.row(f) == {"finding": "The cache is \\*exact\\*.", "measured": "24 of 24 matched; largest 5.77e-05.",
                             "test": "exact match, n = 24 prompts, 95 % CI 90.6–100 %, p = 0.0012"}
    # an interval across zero, or below it, is not written as a dash after a minus sign
    assert FORMAT.test(Test("sign test", 8, "documents", (-1.6, 7.8), "points")) == \
        "sign test, n = 8 documents, 95 % CI from −1.6 to 7.8 points"
    assert FORMAT.test(Test("t", 8, "documents", (-3e-05, -1e-05))) == "t, n = 8 documents, 95 % CI from −3e-05 to −1e-05"


def test_a_finding_names_every_number_its_sentence_uses():
    with pytest.raises(ValueError, match=r"sentence fields \['n', 'same'\] and numbers \['same'\] differ"):
        Finding("k", "Claim.", "{same} of {n}", (("same", 1),))


def test_box_and_sections_render_as_the_page_and_the_notebook_show_them():
    point = Finding("p", "Point.", "{x} items.", (("x", 3),))
    page = PageFindings(Finding("a", "Yes.", "Because."), (point,), {"s": Section(point, (point,), ("detail <b>",))})
    box = page.show_box()
    assert box._repr_html_().startswith('<div class="admonition important"><p class="admonition-title">'
                                        'What this chapter finds</p><p><strong>Yes.</strong> Because.</p>')
    assert "<li><strong>Point.</strong> 3 items.</li>" in box._repr_html_()
    shown = page.show("s", "all of it")
    assert shown._repr_html_().startswith("<p><strong>Point.</strong> 3 items.</p>")
    assert "<summary class=\"sd-summary-title sd-card-header\">Evidence: all of it</summary>" in shown._repr_html_()
    assert "detail &lt;b&gt;" in shown._repr_html_()  # detail texts are escaped, never bolded by pattern
    assert "{glue" not in shown._repr_markdown_() and "**Point.**" in shown._repr_markdown_()
    with pytest.raises(ValueError, match="1 to 5 findings"):
        PageFindings(point, (point,) * 6, {})


def test_a_sections_tables_show_in_its_evidence_block_with_their_captions():
    """An Evidence block holds its tables after its texts: in the book and JupyterLab as the page's table
    HTML under its caption, in a text front end as a Markdown pipe table; a table a run did not produce
    (None) is left out, and a section with tables only still gets its block."""
    from kvutils.report.findings import captioned
    from kvutils.report.tables import rows_table

    point = Finding("p", "Point.", "{x} items.", (("x", 3),))
    table = rows_table({"m | 1": {"a": "1 [0–2]", "b": "x"}}, "model")
    page = PageFindings(point, (point,), {"s": Section(point, (), (), captioned(("Per model", table),
                                                                                  ("not run", None)))})
    shown = page.show("s", "tables")
    html = shown._repr_html_()
    assert '<p class="caption"><em>Per model</em></p><table class="dataframe kvutils-table">' in html
    assert "not run" not in html and html.index("</summary>") < html.index("Per model")
    text = shown._repr_markdown_()
    assert "*Per model*\n\n| model | a | b |\n| --- | --- | --- |\n| m \\| 1 | 1 \\[0–2\\] | x |" in text
    assert page.show("s", "tables").evidence is not None and Section(point).tables == ()


def test_a_tests_table_gives_n_the_interval_p_and_the_verdict_of_each_paired_test():
    from kvutils.core import compare
    from kvutils.report.tables import tests_table

    def paired(verdict, ci=(-0.5, -0.1)):
        return compare.Paired("with", "without", 16, -0.3, ci, 0.004, verdict)

    table = tests_table({"lower": paired(compare.A_LOWER), "higher": paired(compare.A_HIGHER, (0.1, 0.5)),
                         "few": paired(compare.CANNOT, None), "same": paired(compare.IDENTICAL),
                         "open": paired(compare.NO_DIFFERENCE)})
    assert list(table["verdict"]) == ["with lower", "with higher", "cannot separate at this n", "identical",
                                      "no detectable difference"]
    assert table.loc["lower", "difference a − b [95 % interval]"] == "-0.3 [-0.5, -0.1]"
    assert table.loc["few", "difference a − b [95 % interval]"] == "-0.3"  # no interval at this n
    assert set(table["n"]) == {"16 documents"} and set(table["p (sign test)"]) == {"0.004"}


@pytest.mark.parametrize("name, build", [
    ("01_cache_exactness", cache_exactness.chapter1_findings),
    ("02_bert_contrast", lambda n: bert_contrast.chapter2_findings(n, 32)),
    ("03_sense_probes", sense_probes.chapter3_findings)])
def test_each_box_holds_short_findings_glued_to_their_numbers(name, build):
    page = build(_numbers(name))
    assert 1 <= len(page.box) <= 5 and len({f.key for f in page.box}) == len(page.box)
    for f in page.box:
        words = len(re.sub(r"\s[%–]\s?", " ", FORMAT.bullet(f)).split())
        assert words <= 36, FORMAT.bullet(f)
    assert page.answer.claim in ("Yes.", "In later positions.")


def test_chapter1_claims_follow_the_numbers():
    numbers = _numbers("01_cache_exactness")
    page = cache_exactness.chapter1_findings(numbers)
    assert [f.claim for f in page.box][:2] == ["The cache is exact.", "fp32 leaves rounding only."]
    assert page.box[0].value("n") == 48 and page.box[0].value("same") == 48
    changed = copy.deepcopy(numbers)
    changed["smollm2-135m"]["float64"]["decode"]["identical"] -= 1
    page = cache_exactness.chapter1_findings(changed)
    assert page.box[0].claim == "The cache diverged in float64." and page.answer.claim == "Not in this run."


def _probe(right_per_depth: list[list[int]]) -> dict:
    n = len(right_per_depth[0])
    return {"n_items": n, "old_position_pct": [50.0] * len(right_per_depth),
            "new_position_pct": [100 * sum(d) / n for d in right_per_depth],
            "new_position_right": right_per_depth, "old_position_right": [[1, 0] * (n // 2)] * len(right_per_depth),
            "distance": "cosine"}


def test_a_best_depth_is_judged_at_its_holm_p_in_chapter_3_and_the_conclusions():
    """13 of 16 words right on both senses, 3 on neither: p = 0.021 at one depth, above 0.05 once Holm
    pays for picking it among 4 depths; chapter 3's box and the conclusions say the same."""
    best_words = [1, 1] * 13 + [0, 0] * 3
    probe = _probe([[1, 0] * 16, [1, 0] * 16, best_words, [1, 0] * 16])
    rates = sense_probes.depth_rates(probe, "new")
    best = sense_probes.best_depth(rates)
    assert best.depth == 2 and rates[2].above and best.holm_p == pytest.approx(min(1, 4 * rates[2].p))
    assert not best.above and best.holm_p >= compare.ALPHA
    finding = sense_probes._new_finding("m", probe)
    assert finding.claim == "A new copy did not read the sense detectably."
    assert finding.test.p == best.holm_p
    verdict = conclusions.rq2_verdict({"m": {"probe": probe}})
    assert "at its best depth, 2, right on 26 of 32" in verdict and "no detectable difference from chance" in verdict
    assert f"Holm-adjusted p = {best.holm_p:.2g} over 4 depths" in verdict


def test_chapter3_counts_the_depths_as_the_conclusions_do():
    numbers = _numbers("03_sense_probes")
    page = sense_probes.chapter3_findings(numbers)
    for model in ("gemma3-270m", "smollm2-135m"):
        f = next(f for f in page.box + page.sections["probe"].evidence if f.key == f"new_{model}")
        verdict = conclusions.rq2_verdict({model: numbers[model]})
        assert f"above chance at {f.value('held')} of {f.value('depths')} depths" in verdict
        assert f"at its best depth, {f.value('depth')}," in verdict


def _rendered(name: str, page: PageFindings) -> dict:
    """The committed notebook with its display cells' outputs as a run would show them."""
    nb = json.loads((REPO_ROOT / "notebooks" / f"{name}.ipynb").read_text())
    for cell in nb["cells"]:
        cell["source"] = "".join(cell["source"])
        shown = (page.show_box() if "display(pending()" in cell["source"] else
                 page.show(*m.groups()) if (m := re.match(r'page\.show\("(\w+)", "([^"]+)"\)', cell["source"]))
                 else None)
        if shown is not None:
            cell["outputs"] = [{"output_type": "display_data", "data": {"text/html": shown._repr_html_()}}]
    return nb


@pytest.mark.parametrize("name, build", [
    ("01_cache_exactness", cache_exactness.chapter1_findings),
    ("02_bert_contrast", lambda n: bert_contrast.chapter2_findings(n, 32)),
    ("03_sense_probes", sense_probes.chapter3_findings)])
def test_pages_keep_their_budgets_on_the_full_build(name, build):
    nb = _rendered(name, build(_numbers(name)))
    measured = book_page.measure(nb)
    assert measured["words"] <= 1200 and measured["median"] <= 22 and measured["longest"] <= 50, measured
    cells = [c for c in nb["cells"] if c["cell_type"] == "markdown" or c.get("outputs")]
    assert cells[0]["source"].startswith("# ") and "admonition important" in cells[1]["outputs"][0]["data"]["text/html"]
    assert not any("{glue" in c["source"] for c in nb["cells"])


def test_visible_prose_leaves_out_tables_and_collapsed_blocks():
    nb = {"cells": [
        {"cell_type": "markdown", "source": "# Title\n\nOne short sentence. Two more words.\n\n| a | b |\n|---|---|\n"
                                            "\n:::{dropdown} Evidence: x\nhidden words here\n:::\n"},
        {"cell_type": "code", "metadata": {"tags": ["remove-input"]}, "outputs": [{"output_type": "display_data", "data": {
            "text/html": "<p>Shown here.</p><details><summary>s</summary>not shown</details><table>t</table>"}}]},
        {"cell_type": "code", "metadata": {"tags": ["remove-cell"]}, "outputs": [{"output_type": "display_data", "data": {
            "text/html": "<p>never shown</p>"}}]}]}
    assert book_page.visible_prose(nb).split() == ["Title.", "One", "short", "sentence.", "Two", "more", "words.",
                                                   "Shown", "here."]
    assert book_page.sentence_lengths(book_page.visible_prose(nb)) == [1, 3, 3, 2]
    assert book_page.myst_to_html(":::{dropdown} Evidence: x\nbody\n:::") == (
        "<details><summary>Evidence: x</summary>\n\nbody\n\n</details>")
