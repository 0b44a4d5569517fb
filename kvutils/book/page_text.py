"""How much a built page asks a reader to read: its visible prose, its sentences, and whether it opens
with its findings (issue 50, item 2). Measured, not yet enforced.

    python -m kvutils.book.page_text _build/html

prints one row per page: words of visible prose, sentences, median and longest sentence (words),
whether the page opens with an admonition titled FINDINGS_TITLE, its budget, and what breaks it.

Visible prose is the text of the page's article that a reader sees without a click: tables, code
(<pre>, <code>), scripts, headings, admonition titles and collapsed blocks (<details>,
sphinx-togglebutton dropdowns, anything `hidden`) are left out. Sentences are split within each
block (a paragraph or a list item never runs into the next) at ".", "!" or "?" followed by a space
and a capital, a digit or an opening bracket or quote, sparing the common abbreviations. The
budgets are data (BUDGETS); `violations` lists what a page breaks of them.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

FINDINGS_TITLE = "What this chapter finds"
MEDIAN_SENTENCE_WORDS = 22  # at most, on every budgeted page
LONGEST_SENTENCE_WORDS = 50  # no sentence longer


@dataclass(frozen=True)
class Budget:
    """The visible prose a page may hold: pages whose file name starts with `prefix`."""

    prefix: str
    max_words: int
    pages: str  # the page as the issue names it


BUDGETS = (Budget("01_", 1200, "chapter 1"), Budget("02_", 1200, "chapter 2"),
           Budget("03_", 1200, "chapter 3"),
           Budget("04_", 3000, "chapter 4 (each page, where it is split in two)"),
           Budget("05_", 2500, "chapter 5"), Budget("06_", 1500, "conclusions, outside the guide's table"))

SKIPPED_TAGS = {"head", "title", "table", "pre", "code", "script", "style", "details", "nav", "header",
                "footer", "template", "h1", "h2", "h3", "h4", "h5", "h6", "button", "svg", "math", "noscript"}
SKIPPED_CLASSES = {"admonition-title", "dropdown", "toggle-hidden", "headerlink", "cell_input", "math",
                   "MathJax", "sd-dropdown"}
BLOCK_TAGS = {"p", "li", "dt", "dd", "div", "section", "blockquote", "figcaption", "caption", "article",
              "ul", "ol", "dl", "br", "main", "aside", "figure"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
             "wbr"}
ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "cf.", "et al.", "etc.", "Fig.", "Eq.", "approx.", "ch.", "No.")
# a stop and its closing marks, where a space and a sentence's start follow
SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*(?=\s+[A-Z0-9(\"'“‘\[])")
WORD = re.compile(r"\S*\w\S*")


@dataclass(frozen=True)
class PageText:
    """What one page asks a reader to read."""

    page: str
    words: int
    sentences: tuple[int, ...]  # words per sentence, in reading order
    opens_with_findings: bool

    @property
    def median_sentence(self) -> float:
        return statistics.median(self.sentences) if self.sentences else 0.0

    @property
    def longest_sentence(self) -> int:
        return max(self.sentences, default=0)


class _Reader(HTMLParser):
    """Collects the visible prose of the article, block by block, and the first text after its title."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, bool, bool]] = []  # (tag, skipped, an admonition)
        # inside a warning admonition (the quick book's label): not the opening
        self.banner_depth: int | None = None
        self.blocks: list[str] = []
        self.current: list[str] = []
        self.seen_title = False
        self.first_after_title: tuple[str, bool] | None = None  # its text, inside an admonition's title

    def _skipping(self) -> bool:
        return any(skipped for _, skipped, _ in self.stack)

    def flush(self) -> None:
        text = " ".join("".join(self.current).split())
        if text:
            self.blocks.append(text)
        self.current = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        if tag in BLOCK_TAGS:
            self.flush()
        if tag in VOID_TAGS:
            return
        skipped = (tag in SKIPPED_TAGS or bool(classes & SKIPPED_CLASSES) or "hidden" in attrs
                   or "display:none" in (attrs.get("style") or "").replace(" ", ""))
        self.stack.append((tag, skipped, "admonition-title" in classes))
        if {"admonition", "warning"} <= classes and self.banner_depth is None:
            self.banner_depth = len(self.stack)
        if tag == "h1":
            self.seen_title = True

    def handle_endtag(self, tag):
        if tag in VOID_TAGS:
            return
        while self.stack:  # close up to the matching tag (HTML forgives a missing end tag)
            if self.stack.pop()[0] == tag:
                break
        if self.banner_depth is not None and len(self.stack) < self.banner_depth:
            self.banner_depth = None
        if tag in BLOCK_TAGS:
            self.flush()

    def handle_data(self, data):
        text = " ".join(data.split())
        in_title = any(tag == "h1" for tag, _, _ in self.stack)
        first = self.first_after_title is None and self.banner_depth is None
        if text and self.seen_title and not in_title and first:
            self.first_after_title = (text, any(title for _, _, title in self.stack))
        if not self._skipping():
            self.current.append(data)


def article_html(html: str) -> str:
    """The page's article (the pydata theme's `<article class="bd-article">`, else `<main>`, else the
    whole page): the sidebars, the header and the footer are not what the page says."""
    article = r'<article[^>]*class="[^"]*bd-article[^"]*"[^>]*>(.*)</article>'
    for pattern in (article, r"<main[^>]*>(.*)</main>"):
        found = re.search(pattern, html, flags=re.S)
        if found:
            return found.group(1)
    return html


def _read(html: str) -> _Reader:
    reader = _Reader()
    reader.feed(article_html(html))
    reader.close()
    reader.flush()
    return reader


def prose_blocks(html: str) -> list[str]:
    """The visible prose of a page, one string per block (paragraph, list item, caption)."""
    return _read(html).blocks


def split_sentences(block: str) -> list[str]:
    """The sentences of one block of prose (see the module's docstring for the rule)."""
    shielded = block
    for i, abbreviation in enumerate(ABBREVIATIONS):
        shielded = shielded.replace(abbreviation + " ", abbreviation.replace(".", f"\0{i}\0") + " ")
    cuts = [0] + [end.end() for end in SENTENCE_END.finditer(shielded)] + [len(shielded)]
    sentences = []
    for start, stop in zip(cuts, cuts[1:]):
        part = shielded[start:stop]
        for i, abbreviation in enumerate(ABBREVIATIONS):
            part = part.replace(abbreviation.replace(".", f"\0{i}\0"), abbreviation)
        if WORD.search(part):
            sentences.append(part.strip())
    return sentences


def words(text: str) -> int:
    """Words in `text`: runs of non-space characters holding a letter or digit (a lone dash is none)."""
    return len(WORD.findall(text))


def page_text(html: str, page: str = "") -> PageText:
    """Measure one built page (its HTML as a string)."""
    reader = _read(html)
    sentences = tuple(words(s) for block in reader.blocks for s in split_sentences(block))
    first = reader.first_after_title
    opens = first is not None and first[1] and first[0].lower().startswith(FINDINGS_TITLE.lower())
    return PageText(page, sum(words(b) for b in reader.blocks), sentences, opens)


def budget_for(page: str) -> Budget | None:
    """The budget of a page (by its file name), or None for a page the issue sets none for."""
    name = Path(page).name
    return next((b for b in BUDGETS if name.startswith(b.prefix)), None)


def violations(measure: PageText) -> list[str]:
    """What a budgeted page breaks: its words, its median and its longest sentence, and its opening
    (the findings box); empty for a page within them or one with no budget."""
    budget = budget_for(measure.page)
    if budget is None:
        return []
    problems = []
    if measure.words > budget.max_words:
        problems.append(f"{measure.words} words > {budget.max_words} ({budget.pages})")
    if measure.median_sentence > MEDIAN_SENTENCE_WORDS:
        problems.append(f"median sentence {measure.median_sentence:g} words > {MEDIAN_SENTENCE_WORDS}")
    long = [n for n in measure.sentences if n > LONGEST_SENTENCE_WORDS]
    if long:
        problems.append(f"{len(long)} sentence(s) over {LONGEST_SENTENCE_WORDS} words (longest {max(long)})")
    if not measure.opens_with_findings:
        problems.append(f"does not open with a box titled {FINDINGS_TITLE!r}")
    return problems


def measure_site(html_dir: str | Path) -> list[PageText]:
    """Every page of a built book (the site's own folders left out), in file order."""
    root = Path(html_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"html_dir: {root} is not a folder; build the book first (make book)")
    pages = sorted(p for p in root.rglob("*.html")
                   if not any(part.startswith("_") for part in p.relative_to(root).parts)
                   and p.name not in {"genindex.html", "search.html", "py-modindex.html"})
    return [page_text(p.read_text(encoding="utf-8"), str(p.relative_to(root))) for p in pages]


def table(measures: list[PageText]) -> str:
    """One row per page, as the CLI prints it."""
    head = f"{'page':<44} {'words':>6} {'budget':>6} {'sent.':>5} {'median':>6} {'max':>4}  box  problems"
    rows = [head]
    for m in measures:
        budget = budget_for(m.page)
        limit = budget.max_words if budget else "-"
        box = "yes" if m.opens_with_findings else "no"
        rows.append(f"{m.page:<44} {m.words:>6} {limit:>6} {len(m.sentences):>5} {m.median_sentence:>6g} "
                    f"{m.longest_sentence:>4}  {box:<3}  {'; '.join(violations(m))}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvutils.book.page_text",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("html_dir", nargs="?", default="_build/html",
                        help="the built book (default: _build/html)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 where a budgeted page breaks its budget")
    args = parser.parse_args(argv)
    measures = measure_site(args.html_dir)
    print(table(measures))
    return 1 if args.strict and any(violations(m) for m in measures) else 0


if __name__ == "__main__":
    sys.exit(main())
