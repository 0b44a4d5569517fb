"""The page-text measure (issue 50, item 2): visible prose outside tables, code and collapsed blocks,
sentences and the findings box, read from small pages laid out as the book's theme lays them out."""
import pytest

from kvutils.book import page_text as pt

FINDINGS = ('<div class="admonition note"><p class="admonition-title">What this chapter finds</p>'
            "<ul><li><p>The cache is exact in float64.</p></li></ul></div>")


def page(body: str, title: str = "1. Is the cache exact?") -> str:
    """A page as the pydata/sphinx-book theme builds it: sidebars and header around the article."""
    return (f"<html><head><title>{title} - ignored</title></head><body><nav>Contents chapter one two</nav>"
            f'<main><article class="bd-article"><section><h1>{title}<a class="headerlink" href="#">#</a></h1>'
            f"{body}</section></article></main><footer>By the authors</footer></body></html>")


def test_only_visible_prose_is_counted():
    html = page("<p>One two three four.</p>"
                "<table><tr><td>many words in a table cell</td></tr></table>"
                '<div class="cell_input"><pre>x = 1  # code words</pre></div>'
                "<p>Inline <code>code_name</code> is left out.</p>"
                "<details><summary>Evidence</summary><p>hidden words one two three</p></details>"
                '<div class="admonition dropdown"><p class="admonition-title">More</p>'
                "<p>folded away</p></div>"
                '<div hidden><p>not shown</p></div><h2>A heading</h2>'
                '<ul><li>a list item</li></ul>')
    assert pt.prose_blocks(html) == ["One two three four.", "Inline is left out.", "a list item"]
    assert pt.page_text(html).words == 4 + 4 + 3


def test_sentences_split_within_blocks_and_spare_abbreviations():
    assert pt.split_sentences("KIVI keeps 4 bits, e.g. at group 32. The top-1 is 86.3 %. (It drops.) 3 of 8 "
                              "documents agree! Why? Because.") == [
        "KIVI keeps 4 bits, e.g. at group 32.", "The top-1 is 86.3 %.", "(It drops.)",
        "3 of 8 documents agree!", "Why?", "Because."]
    html = page("<p>First sentence here. Second one</p><p>third block without a stop</p>")
    assert pt.page_text(html).sentences == (3, 2, 5)  # a paragraph never runs into the next
    assert pt.words("a — b, 0.5 %") == 3  # a lone dash or percent sign is no word


def test_median_and_longest_sentence():
    long = "Every " + " ".join(["word"] * 50) + "."
    m = pt.page_text(page(f"{FINDINGS}<p>Short one. {long} Two words.</p>"),
                     "book/chapters/01_cache_exactness.html")
    assert m.sentences == (6, 2, 51, 2) and m.median_sentence == 4 and m.longest_sentence == 51
    assert pt.violations(m) == ["1 sentence(s) over 50 words (longest 51)"]


def test_the_findings_box_must_open_the_page():
    assert pt.page_text(page(FINDINGS + "<p>Then prose.</p>")).opens_with_findings
    assert not pt.page_text(page("<p>A plan first.</p>" + FINDINGS)).opens_with_findings
    other = FINDINGS.replace("What this chapter finds", "Note")
    assert not pt.page_text(page(other)).opens_with_findings
    # the title's text alone, outside an admonition, is not the box
    assert not pt.page_text(page("<p>What this chapter finds: nothing.</p>")).opens_with_findings


@pytest.mark.parametrize("name, limit", [("01_cache_exactness", 1200), ("03_sense_probes", 1200),
                                         ("04_cache_approximations", 3000), ("05_qwen3_switch", 2500),
                                         ("06_conclusions", 1500)])
def test_each_budget_is_its_pages(name, limit):
    prose = " ".join(["Six words in this short sentence."] * (limit // 6 + 1))
    m = pt.page_text(page(FINDINGS + f"<p>{prose}</p>"), f"book/chapters/{name}.html")
    assert pt.budget_for(m.page).max_words == limit
    assert m.words > limit
    assert pt.violations(m) == [f"{m.words} words > {limit} ({pt.budget_for(m.page).pages})"]
    assert pt.budget_for("book/intro.html") is None
    assert pt.violations(pt.page_text(page(prose), "intro.html")) == []


def test_a_long_median_and_a_missing_box_are_listed():
    prose = " ".join(["This sentence runs on for exactly twenty three words so that the median of the page"
                      " goes past twenty two words right now."] * 3)
    m = pt.page_text(page(f"<p>{prose}</p>"), "book/chapters/02_bert_contrast.html")
    assert pt.violations(m) == ["median sentence 23 words > 22", "does not open with a box titled "
                                "'What this chapter finds'"]


def test_the_cli_prints_one_row_per_page(tmp_path, capsys):
    (tmp_path / "book" / "chapters").mkdir(parents=True)
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "skip.html").write_text(page("<p>not a page</p>"))
    chapter = tmp_path / "book" / "chapters" / "01_cache_exactness.html"
    chapter.write_text(page(FINDINGS + "<p>Two words.</p>"))
    (tmp_path / "book" / "intro.html").write_text(page("<p>Hello there reader.</p>"))
    assert pt.main([str(tmp_path)]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert len(rows) == 3 and rows[0].startswith("page")
    assert rows[1].split()[:6] == ["book/chapters/01_cache_exactness.html", "8", "1200", "2", "4", "6"]
    assert rows[2].split()[:3] == ["book/intro.html", "3", "-"]
    with pytest.raises(FileNotFoundError, match="html_dir"):
        pt.main([str(tmp_path / "missing")])
