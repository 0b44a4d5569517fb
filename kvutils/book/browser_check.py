"""Read the built book in a real browser, offline, and list everything a reader would see broken.

    python -m kvutils.browser_check [_build/html]

The folder is served on 127.0.0.1 and headless Chromium (Debian's, driven by Playwright; no
browser download) opens every page. Any request to another host is blocked and reported, so a
page that needs the network fails. On each page it checks: no console error or uncaught
exception, no failed request or HTTP error, every image loaded with a non-zero size, every
formula typeset by MathJax without error, at least one table on each chapter page, no table cell
cut short, every interactive chart (kvutils.report.interactive) drawn by Plotly with its points, and every
internal link pointing at a page (and anchor) that exists. Search is run once offline.

Then it reads the page as laid out at each of LAYOUT_WIDTHS (a desktop and a phone-width window):
no table or chart in the text column may be wider than the column or need a sideways scroll
(scrollWidth > clientWidth of it or of a box around it), and every Plotly chart must be at least
MIN_CHART_PX wide, give its plot at least MIN_PLOT_SHARE of that width (not a legend), and show its
title, axis titles and legend whole (inside the chart, where Plotly does not cut them).

`check_explorer` drives chapter 3's offline attention explorer like a reader: it changes each
control in turn and records whether what Plotly draws changed, and what it drew.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import shutil
import sys
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urljoin, urlsplit

from kvutils.book import in_page

# Chromium with no network (else it keeps trying Google's hosts). The resolver rule leaves only
# 127.0.0.1 resolvable, so a page reaching out fails and is reported (`_leaving`) with no request
# routing, which left a font from Chromium's cache paused for ever (Chromium bug 1279953: MathJax's
# fonts "in flight" after 30 s).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
SKIPPED_DIRS = ("_static", "_sources", "_images", ".pytest_cache")
SEARCH_TERM = "cache"
EXPLORER_PAGE = "book/chapters/03_sense_probes.html"
EXPLORER_CONTROLS = ("model", "word", "construction", "layer", "head", "query")
LAYOUT_WIDTHS = (1280, 800)  # window widths in CSS px: a laptop, and a phone or a half screen
WINDOW_HEIGHT = 900
MIN_CHART_PX = 600
MIN_PLOT_SHARE = 0.5  # of a chart's width, for the plot itself (the rest: legend, axis titles)


def layout_problems(layout: dict, width: int) -> list[str]:
    """What a reader at a window `width` px wide cannot read whole, from `in_page.LAYOUT_STATE`'s report."""
    at = f"at {width} px"
    problems = [f"{at}: table [{t['label']}] is wider than the {layout['column']}-px column, its numbers "
                f"need a sideways scroll ({'; '.join(t['overflow'])})"
                for t in layout["tables"] if t["overflow"]]
    for c in layout["charts"]:
        if c["overflow"]:
            problems.append(f"{at}: chart {c['id']} is wider than the column ({'; '.join(c['overflow'])})")
        if c["width"] < MIN_CHART_PX:
            problems.append(f"{at}: chart {c['id']} is {c['width']} px wide, under {MIN_CHART_PX} px")
        if c["plot"] < MIN_PLOT_SHARE * c["width"]:
            problems.append(f"{at}: chart {c['id']}'s plot is squeezed to {c['plot']} of its {c['width']} px")
        problems += [f"{at}: chart {c['id']}: {text} is cut at the chart's edge" for text in c["cut"]]
    return problems


@dataclass
class PageCheck:
    """What the browser saw on one page."""
    problems: list[str] = field(default_factory=list)
    images: int = 0
    formulas: int = 0
    tables: int = 0
    charts: dict[str, int] = field(default_factory=dict)  # interactive chart id -> points Plotly drew


class BrowserUnavailable(RuntimeError):
    """No Chromium or no Playwright here; the message says which and how to install it."""


def chromium_path() -> str:
    path = os.environ.get("KVUTILS_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise BrowserUnavailable("no chromium executable on PATH (and KVUTILS_CHROMIUM is not set): "
                                 "apt-get install chromium")
    return path


def html_pages(html_dir: Path) -> list[str]:
    """Every page of the site, as paths relative to its root ('book/intro.html')."""
    return sorted(p.relative_to(html_dir).as_posix() for p in html_dir.rglob("*.html")
                  if p.relative_to(html_dir).parts[0] not in SKIPPED_DIRS)


@contextmanager
def serve(html_dir: Path):
    """Serve the folder on 127.0.0.1 (a free port) for the duration; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass

    def send_head(self):
        """Chromium's own /favicon.ico request (no page event names it, only a console error) gets
        "204 No Content" where the site has none, not a 404 blamed on the first page opened."""
        if self.path.split("?")[0] == "/favicon.ico" and not Path(self.translate_path(self.path)).is_file():
            self.send_response(204)
            self.end_headers()
            return None
        return super().send_head()


def broken_links(html_dir: Path, page: str, hrefs: list[str]) -> list[str]:
    """Internal links of one page whose target file, or anchor in it, does not exist."""
    problems = []
    for href in hrefs:
        parts = urlsplit(href)
        if parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")):
            continue
        target = urljoin("/" + page, parts.path).lstrip("/") if parts.path else page
        path = html_dir / unquote(target)
        if path.is_dir():
            path = path / "index.html"
        if not path.is_file():
            problems.append(f"link {href!r} -> {target} does not exist")
        elif parts.fragment and path.suffix == ".html":
            anchor = unquote(parts.fragment)
            if not re.search(rf'id="{re.escape(anchor)}"', path.read_text(errors="replace")):
                problems.append(f"link {href!r}: no anchor #{anchor} in {target}")
    return problems


def check_site(html_dir: str | Path, chapter_dir: str = "book/chapters/",
               scheme: str = "http") -> dict[str, PageCheck]:
    """Open every page of the built site in headless Chromium, then run a search; return what was
    seen on each (the search under the key 'search.html?q=cache'). scheme "http" serves the folder
    on 127.0.0.1; "file" opens the files directly, as a reader who double-clicks index.html."""
    if scheme not in ("http", "file"):
        raise ValueError(f"scheme: {scheme!r}; choose 'http' or 'file'")
    html_dir = Path(html_dir)
    pages = html_pages(html_dir)
    if not pages:
        raise ValueError(f"html_dir: {html_dir} holds no .html pages; build the book first")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as err:
        raise BrowserUnavailable("playwright is not installed: pip install playwright") from err
    executable = chromium_path()
    report: dict[str, PageCheck] = {}
    with (serve(html_dir) if scheme == "http" else nullcontext(html_dir.resolve().as_uri() + "/")) as base, \
            sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": LAYOUT_WIDTHS[0], "height": WINDOW_HEIGHT})
            for page_path in _progress(pages):
                check, shown, hrefs = _check_page(context, base, page_path, page_path.startswith(chapter_dir))
                check.problems += broken_links(html_dir, shown, hrefs)
                report[page_path] = check
            # a site without a search page (a test's one-page site) is told so at once, not after the
            # search's 15-second wait for results
            report["search.html?q=" + SEARCH_TERM] = PageCheck(
                _check_search(context, base) if (html_dir / "search.html").is_file()
                else ["the site has no search.html to search"])
        finally:
            browser.close()
    return report


def _progress(pages: list[str]):
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return pages
    return tqdm(pages, desc="pages in Chromium", unit="page", file=sys.stderr)


def _leaving(base: str, problems: list[str], request) -> None:
    """Report a request for anything outside the site (the resolver rule makes it fail)."""
    if not request.url.startswith((base, "data:", "blob:")):
        problems.append(f"request leaves the site: {request.url}")


def _check_page(context, base: str, page_path: str, is_chapter: bool) -> tuple[PageCheck, str, list[str]]:
    """(what one page showed, the page finally shown (index.html redirects), its links' hrefs)."""
    problems: list[str] = []
    page = context.new_page()
    page.on("console",
            lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: problems.append(f"uncaught exception: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
    page.on("response", lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    in_flight: set = set()
    page.on("request", lambda r: in_flight.add(r))
    page.on("request", functools.partial(_leaving, base, problems))
    page.on("requestfinished", lambda r: in_flight.discard(r))
    page.on("requestfailed", lambda r: in_flight.discard(r))
    try:
        page.goto(base + page_path, wait_until="load")
        _wait_until_quiet(page, in_flight)
        state = page.evaluate(in_page.PAGE_STATE)
        shown = page.url.removeprefix(base).split("#")[0].split("?")[0]
        for width in LAYOUT_WIDTHS:
            page.set_viewport_size({"width": width, "height": WINDOW_HEIGHT})
            page.wait_for_timeout(200)  # the theme's layout settles (its sidebars fold away at narrow widths)
            problems += layout_problems(page.evaluate(in_page.LAYOUT_STATE), width)
    finally:
        page.close()
    problems += [f"image not loaded or zero-sized: {i['src']}" for i in state["images"] if not i["ok"]]
    if state["typeset"] < state["maths"]:
        problems.append(f"{state['maths'] - state['typeset']} of {state['maths']} formulas not typeset by "
                        "MathJax")
    if state["mathErrors"]:
        problems.append(f"{state['mathErrors']} MathJax errors")
    if state["truncated"]:
        problems.append(f"{state['truncated']} table cells cut short ('...'): "
                        "set pandas' display.max_colwidth and display.max_rows")
    if is_chapter and state["tables"] == 0:
        problems.append("a chapter page without a table")
    problems += [f"interactive chart {c['id']} drew no points" for c in state["charts"] if not c["points"]]
    check = PageCheck(problems, len(state["images"]), state["maths"], state["tables"],
                      {c["id"]: c["points"] for c in state["charts"]})
    return check, shown, state["hrefs"]


def _wait_until_quiet(page, in_flight: set, quiet_ms: int = 500, limit_ms: int = 30_000) -> None:
    """Wait until no request of the page's own has been in flight for `quiet_ms`, and a redirect
    (index.html) has landed. Playwright's "networkidle" is not used: with plotly.js on a page it
    sometimes never fired (seen here under load) though every request had finished; and file://
    pages never report it at all."""
    quiet = waited = 0
    while quiet < quiet_ms and waited < limit_ms:
        page.wait_for_timeout(100)
        waited += 100
        quiet = quiet + 100 if not in_flight else 0
    page.wait_for_load_state("load")
    if in_flight:
        raise TimeoutError(f"{page.url}: requests still in flight after {limit_ms} ms: "
                           + ", ".join(sorted(r.url for r in in_flight))[:500])


def _check_search(context, base: str) -> list[str]:
    page = context.new_page()
    problems: list[str] = []
    page.on("console",
            lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    try:
        page.goto(f"{base}search.html?q={SEARCH_TERM}", wait_until="load")
        try:
            page.wait_for_selector("#search-results li", timeout=15_000)
        except Exception:  # noqa: BLE001 -- playwright's TimeoutError; reported, not raised
            problems.append(f"searching for {SEARCH_TERM!r} found no page")
    finally:
        page.close()
    return problems


@dataclass
class ExplorerCheck:
    """What driving the explorer showed: `changed[control]` says whether changing that control
    changed the plotted data; `states` holds the explorer's state first and after each change."""
    problems: list[str] = field(default_factory=list)
    changed: dict[str, bool] = field(default_factory=dict)
    states: list[dict] = field(default_factory=list)


def _other_value(control: dict) -> str:
    """A value of the control other than its current one: the last option, or the range's far end."""
    if control["options"] is not None:
        others = [o for o in control["options"] if o != control["value"]]
        if not others:
            raise ValueError(f"a select with one option ({control['value']!r}) cannot be changed")
        return others[-1]
    low, high = int(control["min"]), int(control["max"])
    if low == high:
        raise ValueError(f"a range from {low} to {high} cannot be changed")
    return str(high if int(control["value"]) != high else low)


def check_explorer(html_dir: str | Path, page: str = EXPLORER_PAGE, scheme: str = "file",
                   controls: tuple[str, ...] = EXPLORER_CONTROLS) -> ExplorerCheck:
    """Open `page`, wait for the explorer's first drawing, then change each control in turn (as a
    reader would: pick another option, drag a slider to its end), each time waiting for the redraw.
    Requests leaving the folder fail and are reported, as are console errors."""
    from playwright.sync_api import sync_playwright

    html_dir = Path(html_dir)
    if not (html_dir / page).is_file():
        raise ValueError(f"page: {page} is not in {html_dir}; build the book first")
    check = ExplorerCheck()
    problems = check.problems
    with (serve(html_dir) if scheme == "http" else nullcontext(html_dir.resolve().as_uri() + "/")) as base, \
            sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            tab = context.new_page()
            tab.on("request", functools.partial(_leaving, base, problems))
            tab.on("console",
                   lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            tab.on("pageerror", lambda e: problems.append(f"uncaught exception: {e}"))
            tab.on("requestfailed", lambda r: problems.append(f"request failed: {r.url} ({r.failure})"))
            tab.goto(base + page, wait_until="load")
            try:
                tab.wait_for_function("() => Number(document.getElementById('attention-explorer')"
                                      "?.dataset.draws || 0) >= 1", timeout=30_000)
            except Exception:  # noqa: BLE001 -- playwright's TimeoutError
                problems.append("the explorer never drew")
                return check
            state = tab.evaluate(in_page.EXPLORER_STATE)
            check.states.append(state)
            for name in controls:
                control = state["controls"][name]
                value = _other_value(control)
                element = tab.locator(f"#attention-explorer [data-control={name}]")
                if control["tag"] == "select":
                    element.select_option(value)
                else:
                    element.fill(value)
                try:
                    tab.wait_for_function(f"() => Number(document.getElementById('attention-explorer')"
                                          f".dataset.draws) > {state['draws']}", timeout=10_000)
                except Exception:  # noqa: BLE001 -- playwright's TimeoutError; reported, not raised
                    problems.append(f"changing {name} to {value!r} did not redraw the explorer")
                after = tab.evaluate(in_page.EXPLORER_STATE)
                check.changed[name] = json.dumps(after["traces"]) != json.dumps(state["traces"])
                check.states.append(after)
                state = after
        finally:
            browser.close()
    return check


def main(argv: list[str] | None = None) -> None:
    from kvutils.core.checks import check_flags

    parser = argparse.ArgumentParser(prog="python -m kvutils.browser_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("html_dir", nargs="?", default="_build/html")
    parser.add_argument("--scheme", default="http", choices=["http", "file"])
    check_flags(parser, argv)
    args = parser.parse_args(argv)
    if not Path(args.html_dir).expanduser().is_dir():  # before Chromium starts
        parser.error(f"html_dir: {args.html_dir} is not a folder; build the book first (make book), or give "
                     "the folder of its HTML")
    report = check_site(args.html_dir, scheme=args.scheme)
    for page, check in report.items():
        print(f"{page}: {check.images} images, {check.formulas} formulas, {check.tables} tables")
        for problem in check.problems:
            print(f"  - {problem}")
    bad = [page for page, check in report.items() if check.problems]
    print(f"{len(report)} pages checked in Chromium, offline: "
          + ("no problem" if not bad else f"{len(bad)} with problems"))
    sys.exit(1 if bad else 0)


def cli(argv: list[str] | None = None) -> int:
    main(argv)
    return 0


if __name__ == "__main__":
    cli()
