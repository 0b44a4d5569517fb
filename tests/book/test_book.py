"""The book builds (-W: a warning fails) from the quick profile's executed chapters, with the glued
numbers, the figures and the side-by-side tables on every chapter page, and no widget manager or
other script fetched from a CDN for the explorer."""
import html as html_lib
import json
import re
from pathlib import Path


def _page(html: Path, name: str) -> str:
    return (html / "book" / "chapters" / f"{name}.html").read_text()


def _text(page: str) -> str:
    inline = re.sub(r"</?(?:strong|em|span|wbr)\b[^>]*>", "", page)  # a bold number stays inside its sentence
    return html_lib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", inline))).replace("’", "'")


def test_chapter1_page(built_book):
    root, html = built_book
    page = _page(html, "01_cache_exactness")
    n = json.loads((root / "results" / "01_cache_exactness.json").read_text())["parameters"]["n_prompts"]
    text = _text(page)
    # the Evidence tables: every prefix by model and precision, and the per-step procedure beside one pass
    assert "bit-identical under two continuations" in text and "tiny-llama, float64" in text
    assert "the same divergences as one pass" in text and "time per prompt ÷ one pass" in text
    assert f"{n}/{n}" in text  # Table 1's identical sequences
    assert "[per step (article's procedure)]" in _text(page) and "[one pass]" in _text(page)
    assert "Side by side with the article" in page and "article (Pythia)" in page
    assert page.count('src="../../_images/') >= 1


def test_chapter2_page(built_book):
    _, html = built_book
    text = _text(_page(html, "02_bert_contrast"))
    assert "largest ‖ΔK‖/‖K‖, any layer" in text and "16/16" in text  # the table: every word bit-identical
    assert "one right-padded batch" in text and "tiny-bert: the embeddings are identical" in text  # why, in words
    assert "0.529898 (BERT-base, layer 12)" in text  # the article's column
    assert _page(html, "02_bert_contrast").count('src="../../_images/') == 1


def test_chapter3_page(built_book):
    _, html = built_book
    page = _page(html, "03_sense_probes")
    text = _text(page)
    assert "50 at all 3 depths" in text and "50 at all 7 depths" in text
    assert "above chance from depth" in text and "tiny-gemma3, new copy (7 depths)" in text  # the Evidence table
    assert "90.625 [5, 6, 12]" in text  # the article's column
    assert page.count('src="../../_images/') == 2  # probe chart, attention split
    assert "widget-view" not in page and "html-manager" not in page and "require.min.js" not in page
    # the explorer is drawn in the page (tests/book/test_browser.py drives it), with plotly.js from _static
    assert page.count('id="attention-explorer"') == 1 and '<script src="../../_static/plotly.min.js' in page
    assert (html / "_static" / "plotly.min.js").is_file()
    assert "plotly.min.js" not in _page(html, "01_cache_exactness")  # only pages with a chart carry it


def test_chapter4_page(built_book):
    _, html = built_book
    page = _page(html, "04_cache_approximations")
    text = _text(page)
    assert "tiny-llama, 128 tokens (" in text and "speed-up against the shorter context" in text
    assert "68.625 / 8.578" in text  # the article's DeepSeek-V3 row, recomputed by the formula
    assert "0.064307 · 86.3 · 17.8661" in text  # the article's bf16 row beside ours
    # KIVI against naive quantisation at one bit width, each with the memory it holds (issue 37)
    assert "tiny-llama, 4 bits (KIVI's last 16 tokens in full precision)" in text
    assert "KIVI: % of the exact cache's bytes" in text and "naive: top-1 (%)" in text
    # decode, bytes, approximations, blend sweep, retrieval, the KL ranking against retrieval, the needle kept
    # against retrieval, the follow-up questions; the frontier is the interactive chart
    assert page.count('src="../../_images/') == 8
    assert page.count('class="kvutils-plotly"') == 1 and '<script src="../../_static/plotly.min.js' in page
    assert "snapkv:compression_ratio=0.5" in page and "hf_quantized:backend=fp8" in page  # hover data
    assert "Timed alone, as the build's first job, before the chapters ran side by side, on" in text and "torch thread(s)" in text


def test_chapter5_page(built_book):
    _, html = built_book
    page = _page(html, "05_qwen3_switch")
    text = _text(page)
    assert "tail patch: largest K/V difference" in text and "tiny-qwen3, k = 1" in text
    assert "Per-example tests (McNemar for accuracy" in text and "tiny-qwen3: base, zero-shot" in text
    assert "0.0423106 / 91.11" in text
    assert page.count('src="../../_images/') == 4
    assert page.count('id="kvutils-chart-') == 1 and "plotly.min.js" in page  # the quality-vs-cost chart


def test_every_page_is_in_the_navigation(built_book):
    _, html = built_book
    intro = (html / "book" / "intro.html").read_text()
    for name in ("01_cache_exactness", "02_bert_contrast", "03_sense_probes", "04_cache_approximations",
                 "05_qwen3_switch"):
        assert f"chapters/{name}.html" in intro


def test_conclusions_page_answers_from_the_results(built_book):
    from kvutils.report import conclusions as rc

    root, html = built_book
    page = _page(html, "06_conclusions")
    text = _text(page)
    glue = rc.conclusions_glue(rc.load_chapters(root / "results"))
    for key in ("rq1_verdict", "rq2_verdict", "rq3_breaks"):
        assert _text(glue[key]) in text, key
    assert text.count("article (Pythia-160M)") == 3  # the article's column beside ours for RQ1-3
    assert "article (%), Pythia" in text and "LoRA switch, tail patch (ch. 5, tiny-qwen3, k = 4)" in text
    assert page.count('<img src="data:image/png;base64,') == 2  # the guide's flowchart and chart, drawn by the build


def test_appendices_show_provenance_and_the_benchmark(built_book):
    root, html = built_book
    repro = _text(_page(html, "appendix_a_reproducibility"))
    results = json.loads((root / "results" / "01_cache_exactness.json").read_text())
    assert results["git_commit"] in repro and results["packages"]["torch"] in repro
    assert 'make chapter N=05 PARAMS="-p models Qwen/Qwen3-0.6B"' in repro
    assert "EleutherAI/pythia-160m" in repro and "bert-base-uncased" in repro
    perf = _page(html, "appendix_b_performance")
    bench = json.loads((root / "results" / "bench.json").read_text())
    assert "cached decode per token: kvutils ÷ transformers" in _text(perf)
    from kvutils.report.text import fmt

    assert fmt(bench["decode"]["ratio_kvutils_over_generate"], 4) in _text(perf)
    assert perf.count('src="../../_images/') == 1


def test_the_site_needs_no_network(built_book):
    """MathJax is served from the site itself and no page refers a script or style to a CDN."""
    _, html = built_book
    assert (html / "_static" / "mathjax" / "tex-mml-chtml.js").stat().st_size > 100_000
    assert any((html / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))
    for page in html.rglob("*.html"):
        source = page.read_text()
        external = re.findall(r'<(?:script|link|img)[^>]+(?:src|href)="(https?://[^"]+)"', source)
        assert not external, f"{page.name}: {external}"
        assert "unpkg.com" not in source and "cdn.jsdelivr" not in source, page.name


def test_table_row_labels_wrap_with_the_full_label_as_a_tooltip(built_book):
    """Table 1 (chapter 1) and Table 2 (chapter 4) go to the page through kvutils.report.tables.page_table:
    an op spec may wrap after ':' and ',' (before, the unbreakable specs made the label column as
    wide as the page and pushed the numbers out of view) and carries the whole spec as a tooltip.
    Table 2 shows each operation by its human name ("naive 4-bit"), the spec behind it as its tooltip."""
    _, html = built_book
    page = _page(html, "04_cache_approximations")
    assert 'class="dataframe kvutils-table"' in page
    assert '<th class="kvutils-label" title="quantize_naive:bits=4">naive 4-bit</th>' in page
    assert 'title="fp32: identical sequences [one pass]"' in _page(html, "01_cache_exactness")


def test_no_paragraph_sets_a_number_in_bold(built_book):
    """Before issue 19 every number of a glued finding was bold, so a paragraph of measurements read
    as one bold block; issue 19 kept each clause's first number, picked by a regular expression.
    Now bold comes from a finding's structure (its claim, kvutils.report.findings) and no paragraph
    of any page sets a number alone in bold."""
    _, html = built_book
    for page in sorted((html / "book" / "chapters").glob("*.html")):
        for paragraph in re.findall(r"<p>(.*?)</p>", page.read_text(), flags=re.S):
            bold = [b for b in re.findall(r"<strong>(.*?)</strong>", paragraph, flags=re.S)
                    if re.fullmatch(r"[-−\d.,/e%×+]+", _text(b).strip())]
            assert not bold, (page.name, bold, _text(paragraph).strip()[:300])


def test_pages_open_with_results_not_code_and_show_no_machine_path(built_book):
    """Every code cell's input on a page sits behind the theme's "show code" toggle (hide-input,
    kvutils.book.chapters.for_the_page), and no page prints the results folder's path."""
    from bs4 import BeautifulSoup

    root, html = built_book
    pages = sorted((html / "book" / "chapters").glob("*.html"))
    assert len(pages) == 8
    for page in pages:
        soup = BeautifulSoup(page.read_text(), "html.parser")
        inputs = soup.select("div.cell_input")
        assert inputs, f"{page.name}: no code cell at all (the toggles are what this test checks)"
        shown = [i.get_text()[:80] for i in inputs if i.find_parent("details") is None]
        assert not shown, f"{page.name}: code shown before the reader asks: {shown}"
        assert str(root) not in page.read_text() and "results_dir = \"/" not in soup.get_text(), page.name



DOUBLED = re.compile(r"\b([A-Za-z]{2,})\s+\1\b", re.I)  # "question question"
REPR = re.compile(r"\[\s*'[^']*'(?:\s*,\s*'[^']*')*\s*\]|\{\s*'[^']+'\s*:|\b(?:None|True|False)\b(?=[,)\]])")


def _prose_and_tables(soup) -> str:
    """What a reader reads of a page's article (not the navigation): text outside code cells' inputs
    (shown or behind a toggle)."""
    article = soup.select_one("article") or soup
    for hidden in article.select("div.cell_input, script, style, details.hide"):
        hidden.decompose()
    for cell in article.select("td, th"):  # two cells side by side ("no" | "no") are not a doubled word
        cell.append(" | ")
    return re.sub(r"\s+", " ", article.get_text(" "))


def test_no_page_shows_a_doubled_word_a_python_repr_a_pandas_index_or_a_machine_path(built_book):
    """Issue 37's text defects, over every built chapter page: no word twice in a row, no Python
    list or dict repr (['sliding_attention']), no pandas RangeIndex column (0, 1, 2, … heading the
    rows), no path of this machine."""
    from bs4 import BeautifulSoup

    root, html = built_book
    for page in sorted((html / "book" / "chapters").glob("*.html")):
        soup = BeautifulSoup(page.read_text(), "html.parser")
        for table in soup.select("table.dataframe"):
            heads = [th.get_text().strip() for th in table.select("tbody tr > th:first-child")]
            # any length: the quick book's follow-up table had two rows, headed 0 and 1 (issue 50)
            assert not heads or heads != [str(i) for i in range(len(heads))], \
                f"{page.name}: a table's rows are headed 0, 1, … (a pandas RangeIndex)"
        text = _prose_and_tables(soup)
        assert not DOUBLED.search(text), f"{page.name}: doubled word: {DOUBLED.search(text).group(0)!r}"
        assert not REPR.search(text), f"{page.name}: Python repr: {text[max(0, REPR.search(text).start() - 60):][:140]!r}"
        assert str(root) not in text and str(Path.home()) + "/" not in text, page.name


def test_every_quick_page_says_it_shows_shapes_not_findings(built_book):
    """The quick book is tiny random models: each executed page opens with the warning that says so
    (kvutils.book.chapters.QUICK_BANNER, rendered as the theme's warning admonition)."""
    from bs4 import BeautifulSoup

    _root, html = built_book
    pages = sorted((html / "book" / "chapters").glob("*.html"))
    assert pages
    for page in pages:
        warnings = BeautifulSoup(page.read_text(), "html.parser").select("div.admonition.warning")
        assert any("random weights" in w.get_text() and "not the book's findings" in w.get_text().replace("’", "'")
                   for w in warnings), page.name
