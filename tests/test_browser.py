"""The built book read in a real browser (headless Debian Chromium via Playwright) with no network:
every page loads without console errors or failed requests, its figures have a size, its formulas
are typeset by the local MathJax, chapter pages have their tables, links resolve, search works.

`make test` installs chromium with apt where it can; where it cannot, these tests skip and say why."""
from pathlib import Path

import pytest

from kvutils.paths import REPO_ROOT


def _chromium_or_skip() -> None:
    note = REPO_ROOT / ".venv" / "chromium-unavailable.txt"
    if note.is_file():
        pytest.skip(f"no browser test: {note.read_text().strip()}")
    from kvutils.browser_check import BrowserUnavailable, chromium_path

    try:
        chromium_path()
        import playwright  # noqa: F401
    except (BrowserUnavailable, ImportError) as err:
        pytest.skip(f"no browser test: {err}")


@pytest.fixture(scope="module")
def site_report(built_book):
    _chromium_or_skip()
    from kvutils.browser_check import check_site

    _, html = built_book
    return check_site(html)


def test_every_page_reads_offline_without_problems(site_report):
    problems = {page: check.problems for page, check in site_report.items() if check.problems}
    assert not problems, problems


def test_the_book_also_reads_from_its_files_alone(built_book):
    """A reader who opens _build/html/index.html straight from disk (file://) gets the same book:
    formulas, figures, search, no errors."""
    _chromium_or_skip()
    from kvutils.browser_check import check_site

    _, html = built_book
    report = check_site(html, scheme="file")
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


def _tiny_site(root: Path, body: str) -> Path:
    root.mkdir()
    (root / "index.html").write_text(f"<!doctype html><html><head><title>t</title></head><body>{body}</body></html>")
    return root


def test_the_check_reports_what_a_reader_would_see_broken(tmp_path):
    """A page with a missing image, a CDN script, a broken link and a script error: all reported."""
    _chromium_or_skip()
    from kvutils.browser_check import check_site

    site = _tiny_site(tmp_path / "site", (
        '<img src="missing.png"><script src="https://cdn.jsdelivr.net/npm/x.js"></script>'
        '<a href="nowhere.html">x</a><a href="#no-anchor">y</a><script>undefinedFunction()</script>'
        '<table><tr><td>a long command cut by pandas...</td></tr></table>'))
    problems = " | ".join(check_site(site)["index.html"].problems)
    assert "missing.png" in problems and "HTTP 404" in problems
    assert "cdn.jsdelivr.net" in problems  # blocked: the page needed the network
    assert "nowhere.html" in problems and "#no-anchor" in problems
    assert "undefinedFunction" in problems
    assert "1 table cells cut short" in problems


def test_a_site_without_pages_is_an_error(tmp_path):
    from kvutils.browser_check import check_site

    with pytest.raises(ValueError, match="html_dir"):
        check_site(tmp_path)
