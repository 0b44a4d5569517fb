"""The built book read in a real browser (headless Debian Chromium via Playwright) with no network:
every page loads without console errors or failed requests, its figures have a size, its formulas
are typeset by the local MathJax, chapter pages have their tables, links resolve, search works.

`make test` installs chromium with apt where it can; where it cannot, these tests skip and say why."""
from pathlib import Path

import pytest

from kvutils.core.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # each test drives Chromium: 15 to 30 s


def _chromium_or_skip() -> None:
    note = REPO_ROOT / ".venv" / "chromium-unavailable.txt"
    if note.is_file():
        pytest.skip(f"no browser test: {note.read_text().strip()}")
    from kvutils.book.browser_check import BrowserUnavailable, chromium_path

    try:
        chromium_path()
        import playwright  # noqa: F401
    except (BrowserUnavailable, ImportError) as err:
        pytest.skip(f"no browser test: {err}")


@pytest.fixture(scope="module")
def site_report(built_book):
    _chromium_or_skip()
    from kvutils.book.browser_check import check_site

    _, html = built_book
    return check_site(html)


def test_every_page_reads_offline_without_problems(site_report):
    problems = {page: check.problems for page, check in site_report.items() if check.problems}
    assert not problems, problems


def test_the_book_reads_from_its_files_alone_as_make_dist_packs_it(built_book, site_report, tmp_path):
    """A reader who opens the book straight from disk (file://), _build/html itself or `make dist`'s
    archive unzipped elsewhere (the same files, byte for byte: one check serves both), gets the
    whole book: every page the served book has, formulas, figures, search, none with a problem."""
    _chromium_or_skip()
    import hashlib
    import zipfile

    from kvutils.book.browser_check import check_site
    from kvutils.book.dist import pack

    _, html = built_book
    archive = pack(html, tmp_path / "dist" / "kv-cache-book-test.zip")
    zipfile.ZipFile(archive).extractall(tmp_path / "unpacked")
    unpacked = tmp_path / "unpacked" / "kv-cache-book-test"

    def files(folder):
        return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}
    assert files(unpacked) == files(html)
    report = check_site(unpacked, scheme="file")
    assert set(report) == set(site_report)
    problems = {page: check.problems for page, check in report.items() if check.problems}
    assert not problems, problems
    assert report["book/intro.html"].formulas >= 4


def test_every_page_of_the_book_was_opened(site_report, built_book):
    _, html = built_book
    for name in ("book/intro.html", "book/chapters/01_cache_exactness.html", "book/chapters/05_qwen3_switch.html",
                 "book/chapters/06_conclusions.html", "book/chapters/appendix_a_reproducibility.html",
                 "book/chapters/appendix_b_performance.html", "search.html", "genindex.html"):
        assert name in site_report, name


def test_figures_formulas_and_tables_are_there(site_report):
    chapters = {page: c for page, c in site_report.items() if page.startswith("book/chapters/")}
    assert len(chapters) == 8
    for page, check in chapters.items():
        assert check.tables >= 1, page
    for name in ("01_cache_exactness", "04_cache_approximations", "06_conclusions", "appendix_b_performance"):
        assert chapters[f"book/chapters/{name}.html"].images >= 1, name
    assert site_report["book/intro.html"].formulas >= 4  # typeset: a formula left raw is a problem above
    # chapter 4's frontier, drawn by Plotly in the page: one point per scored method and model
    charts = chapters["book/chapters/04_cache_approximations.html"].charts
    assert len(charts) == 1 and list(charts.values())[0] >= 10, charts


def _tiny_site(root: Path, body: str) -> Path:
    root.mkdir()
    (root / "index.html").write_text(f"<!doctype html><html><head><title>t</title></head><body>{body}</body></html>")
    return root


def test_the_check_reports_what_a_reader_would_see_broken(tmp_path):
    """A page with a missing image, a CDN script, a broken link and a script error: all reported."""
    _chromium_or_skip()
    from kvutils.book.browser_check import SEARCH_TERM, check_site

    site = _tiny_site(tmp_path / "site", (
        '<img src="missing.png"><script src="https://cdn.jsdelivr.net/npm/x.js"></script>'
        '<a href="nowhere.html">x</a><a href="#no-anchor">y</a><script>undefinedFunction()</script>'
        '<table><tr><td>a long command cut by pandas...</td></tr></table>'))
    report = check_site(site)
    # a site without a search page says so at once (not after the search's wait for results)
    assert report[f"search.html?q={SEARCH_TERM}"].problems == ["the site has no search.html to search"]
    problems = " | ".join(report["index.html"].problems)
    assert "missing.png" in problems and "HTTP 404" in problems
    assert "cdn.jsdelivr.net" in problems  # blocked: the page needed the network
    assert "nowhere.html" in problems and "#no-anchor" in problems
    assert "undefinedFunction" in problems
    assert "1 table cells cut short" in problems


def _site_with_plotly(root: Path, body: str) -> Path:
    """A one-page site whose text column (the theme's article.bd-article) is 700 px at most, with
    plotly.js served beside it."""
    import shutil

    from kvutils.report import interactive

    site = _tiny_site(root, f'<article class="bd-article" style="max-width:700px">{body}</article>')
    shutil.copy(interactive.plotly_js_path(), site / interactive.PLOTLY_JS)
    index = site / "index.html"
    index.write_text(index.read_text().replace("<head>", f'<head><script src="{interactive.PLOTLY_JS}"></script>'))
    return site


LONG_TITLE = "Held-out accuracy against the cost of the switch — models: smollm2-135m, gemma3-270m"
LONG_NAMES = ["tail with the tail patch (recompute from layer k), smollm2-135m",
              "stale reuse of the cache under the adapter, smollm2-135m"]


def test_the_check_reports_a_table_or_chart_a_reader_cannot_read_whole(tmp_path):
    """Before issue 19: Table 2's numbers needed a sideways scroll, and a chart with long legend
    entries at its right was squeezed, its title cut. Each is reported, at both window widths."""
    _chromium_or_skip()
    from kvutils.book.browser_check import LAYOUT_WIDTHS, check_site

    traces = ", ".join(f'{{"x": [1, 2], "y": [{i}, 3], "name": "{n}"}}' for i, n in enumerate(LONG_NAMES))
    site = _site_with_plotly(tmp_path / "site", (
        '<table><tr><th>operation</th><td style="white-space:nowrap">quantize_kivi:bits=4,group=32,residual=128 '
        + "0.0643 · 86.30 · 17.87 " * 8 + '</td></tr></table>'
        f'<div id="squeezed" style="width:100%"></div><script>Plotly.newPlot("squeezed", [{traces}], '
        f'{{"title": {{"text": "{LONG_TITLE} and more words to run past the edge"}}}}, {{"responsive": true}});</script>'))
    problems = check_site(site)["index.html"].problems
    for width in LAYOUT_WIDTHS:
        assert any(p.startswith(f"at {width} px: table [operation") and "sideways scroll" in p for p in problems), problems
        assert any(p.startswith(f"at {width} px: chart squeezed's plot is squeezed") for p in problems), problems
        assert any(p.startswith(f"at {width} px: chart squeezed: gtitle") and "is cut" in p for p in problems), problems


def test_a_chart_of_kvutils_interactive_fits_the_column(tmp_path):
    """The same long title and legend through kvutils.report.interactive, beside a table whose long labels
    and numbers wrap (kvutils.report.tables.page_table): nothing for the check to report."""
    _chromium_or_skip()
    import pandas as pd

    from kvutils.book.browser_check import check_site
    from kvutils.report import interactive, tables

    frame = pd.DataFrame({"x": [1.0, 2.0, 3.0, 4.0], "y": [1.0, 2.0, 3.0, 4.0], "policy": LONG_NAMES * 2})
    chart = interactive.scatter(frame, "x", "y", color="policy", title=LONG_TITLE,
                                x_label="time of the switch (% of a full recompute under the adapter)",
                                y_label="mean KL from the exact cache (nats, log; 1e-07 = exact)")
    table = tables.page_table(pd.DataFrame({f"model {i}": ["0.0643 · 86.30 · 17.87"] for i in range(4)},
                                           index=["quantize_kivi:bits=4,group=32,residual=128"]))
    css = (REPO_ROOT / "book" / "_static" / "custom.css").read_text()
    site = _site_with_plotly(tmp_path / "site", f'<style>{css}</style><div class="cell_output">'
                             f'{table._repr_html_()}</div><div class="cell_output">{chart.html}</div>')
    report_ = check_site(site)["index.html"]
    assert report_.problems == [] and list(report_.charts.values()) == [4]


def test_a_site_without_pages_is_an_error(tmp_path):
    from kvutils.book.browser_check import check_site

    with pytest.raises(ValueError, match="html_dir"):
        check_site(tmp_path)


def _recorded(html: Path, page: str) -> dict:
    """The explorer's recorded weights, as the page carries them."""
    import json

    text = (html / page).read_text()
    return json.loads(text.split('class="ae-data">')[1].split("</script>")[0])


def test_the_attention_explorer_answers_every_control_offline(built_book):
    """Chapter 3's explorer, opened from disk with no network: changing each control (model, word,
    text, layer, head, query) changes what Plotly draws, and what it draws is the recorded weights
    of that selection, read the way kvutils.explorer.data reads them."""
    _chromium_or_skip()
    import torch

    from kvutils.book.browser_check import EXPLORER_CONTROLS, EXPLORER_PAGE, check_explorer
    from kvutils.explorer.data import unpack_matrix

    _, html = built_book
    check = check_explorer(html, scheme="file")
    assert not check.problems, check.problems
    assert check.changed == {name: True for name in EXPLORER_CONTROLS}
    payload = _recorded(html, EXPLORER_PAGE)
    for state in check.states:
        chosen = {name: c["value"] for name, c in state["controls"].items()}
        head = None if chosen["head"] == "mean" else int(chosen["head"])
        heat_a, bars_a, heat_b, bars_b = state["traces"]
        for side, (heat, bars) in enumerate(((heat_a, bars_a), (heat_b, bars_b))):
            want = unpack_matrix(payload, chosen["model"], chosen["word"], chosen["construction"], side,
                                 int(chosen["layer"]) - 1, head)
            drawn = torch.tensor([[0.0 if v is None else v for v in row] for row in heat["z"]], dtype=torch.float64)
            torch.testing.assert_close(drawn, want, atol=1e-9, rtol=0)
            query = max(len(want) - 1 - int(chosen["query"]), 0)
            torch.testing.assert_close(torch.tensor(bars["y"], dtype=torch.float64), want[query], atol=1e-9, rtol=0)
        assert chosen["model"] in state["title"] and f"layer {chosen['layer']} of" in state["title"]


def test_the_explorer_check_notices_a_control_that_redraws_nothing(tmp_path):
    """The same view with its head control cut off from the drawing: the check says so."""
    _chromium_or_skip()
    import shutil

    from kvutils import load
    from kvutils.book.browser_check import check_explorer
    from kvutils.core import data
    from kvutils.explorer import data as explorer_data
    from kvutils.explorer import html as explorer_html
    from kvutils.report import interactive

    loaded = load("tiny-llama", "float32", attn_implementation="eager")
    payload = explorer_data.pack([explorer_data.record(loaded, data.load_senses()[:2], explorer_data.CONSTRUCTIONS,
                                                       progress=False)], explorer_data.CONSTRUCTIONS)
    view = explorer_html.explorer_view(payload, word="bank", layer=1).html
    broken = view.replace('controls.head.addEventListener("change", draw);', "")
    assert broken != view
    site = _tiny_site(tmp_path / "site", broken)
    shutil.copy(interactive.plotly_js_path(), site / interactive.PLOTLY_JS)
    index = site / "index.html"
    index.write_text(index.read_text().replace("<head>", f'<head><script src="{interactive.PLOTLY_JS}"></script>'))
    check = check_explorer(site, page="index.html", controls=("word", "head", "layer"))
    assert check.changed == {"word": True, "head": False, "layer": True}
    assert any("changing head" in p for p in check.problems), check.problems


def test_a_page_that_reaches_off_the_site_is_reported_and_a_cached_font_does_not_hang(tmp_path):
    """One page asks a remote host for an image: the check names it, with no network and no request
    routing. Two pages share one font, the second from Chromium's cache: under routing such a request
    sometimes stayed paused for ever (Chromium bug 1279953, CI's failure). That part depends on timing,
    so it guards against the hang coming back rather than proving its absence."""
    _chromium_or_skip()
    from kvutils.book.browser_check import check_site

    font = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")
    if not font.is_file():
        pytest.skip(f"no font at {font} to serve")
    (tmp_path / "f.ttf").write_bytes(font.read_bytes())
    page = ("<html><head>"
            "<style>@font-face {{font-family: T; src: url(f.ttf)}} p {{font-family: T}}</style>"
            "</head><body><p>text</p>{}</body></html>")
    (tmp_path / "a.html").write_text(page.format(""))
    (tmp_path / "b.html").write_text(page.format('<img src="http://remote.example/x.png">'))
    (tmp_path / "c.html").write_text(page.format(""))

    report = check_site(tmp_path)
    assert report["a.html"].problems == [] and report["c.html"].problems == []
    assert any("request leaves the site: http://remote.example/x.png" in p for p in report["b.html"].problems)
