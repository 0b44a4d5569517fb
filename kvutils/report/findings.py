"""Findings as data, and the one formatter that shows them.

A `Finding` is what a page claims (`claim`, set in bold by its structure), the sentence that carries
the measurement (`sentence`, a template with one `{name}` per number), the numbers themselves and
the `Test` behind them. `FORMAT` renders a finding for the findings box (`bullet`), for a table row
(`row`) and, through `box` and `PageFindings.show`, as a displayed output that a notebook rerun shows and the
page renders the same. How a number is written is decided once, in `FindingFormat.number`.

    f = Finding("fp64", "The cache is exact.", "{same} of {n} prompts decoded identically in fp64.",
                (("same", 24), ("n", 24)), Test("count of identical sequences", 24, "prompts"))
    FORMAT.bullet(f)  # '**The cache is exact.** 24 of 24 prompts decoded identically in fp64. (…)'
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from string import Formatter

from markdown_it import MarkdownIt


@dataclass(frozen=True)
class Test:
    """The test that backs a finding: its name, its n (in `unit`) and, where it has one, the 95 %
    interval (in the unit `interval_unit`: "%" for a rate) and the p-value."""

    __test__ = False  # not a pytest class

    name: str
    n: int
    unit: str
    interval: tuple[float, float] | None = None
    interval_unit: str = ""
    p: float | None = None


@dataclass(frozen=True)
class Finding:
    """One finding: `claim` (a sentence a reader could repeat, shown in bold), `sentence` (a
    template whose `{name}` fields are `numbers`' names) and the `test` behind it. `key` names the
    finding for tests and for the notebook (it is unique on a page)."""

    key: str
    claim: str
    sentence: str
    numbers: tuple[tuple[str, object], ...] = ()
    test: Test | None = None

    def __post_init__(self):
        wanted = {name for _, name, _, _ in Formatter().parse(self.sentence) if name}
        given = {name for name, _ in self.numbers}
        if wanted != given:
            raise ValueError(f"Finding {self.key!r}: sentence fields {sorted(wanted)} and numbers "
                             f"{sorted(given)} differ")

    def value(self, name: str):
        return dict(self.numbers)[name]


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


def escaped(text: str) -> str:
    """Text as Markdown that shows it literally (a token '<bos>', a model name with '_')."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


@dataclass(frozen=True)
class FindingFormat:
    """The one formatter: numbers to `digits` significant digits (integers as they are, thousands
    with a comma), a finding as a bullet, a table row or a displayed block."""

    digits: int = 3

    def number(self, value) -> str:
        if isinstance(value, str):
            return escaped(value)
        if isinstance(value, (list, tuple)):
            return ", ".join(self.number(v) for v in value)
        if value is None:
            return "n/a"
        if isinstance(value, bool) or isinstance(value, int):
            return f"{int(value):,}"
        if value != value:
            return "NaN"
        if value == 0:
            return "0"
        if float(value).is_integer() and abs(value) < 1e12:
            return f"{int(value):,}"
        if 1e3 <= abs(value) < 1e12:
            return f"{value:,.0f}"
        return f"{value:.{self.digits}g}"

    def sentence(self, finding: Finding) -> str:
        return finding.sentence.format_map({k: self.number(v) for k, v in finding.numbers})

    def test(self, test: Test | None) -> str:
        """'sign test, n = 32 items, 95 % CI 69–94 %, p = 0.002'; an interval with a negative end
        reads 'from −1.6 to 7.8' (a dash after a minus sign reads as a range of negatives)."""
        if test is None:
            return ""
        parts = [f"{escaped(test.name)}, n = {self.number(test.n)} {escaped(test.unit)}"]
        if test.interval is not None:
            lo, hi = (re.sub(r"^-", "−", self.number(v)) for v in test.interval)
            span = f"from {lo} to {hi}" if min(test.interval) < 0 else f"{lo}–{hi}"
            parts.append(f"95 % CI {span}{test.interval_unit and ' ' + test.interval_unit}")
        if test.p is not None:
            parts.append(f"p = {test.p:.2g}")
        return ", ".join(parts)

    def bullet(self, finding: Finding) -> str:
        """The findings box's line: the claim in bold, the sentence, the test in parentheses."""
        backed = self.test(finding.test)
        return f"**{escaped(finding.claim)}** {self.sentence(finding)}" + (f" ({backed})" if backed else "")

    def row(self, finding: Finding) -> dict[str, str]:
        """A table row: finding | measured | test."""
        return {"finding": escaped(finding.claim), "measured": self.sentence(finding),
                "test": self.test(finding.test) or "—"}

    def box(self, title: str, findings: list[Finding], answer: Finding | None = None) -> Shown:
        """The findings box (an "important" admonition): the answer in one sentence, then one bullet
        per finding."""
        lines = ([self.bullet(answer), ""] if answer else []) + [f"- {self.bullet(f)}" for f in findings]
        return Shown("\n".join(lines), title=title, kind="admonition important")



FORMAT = FindingFormat()

_MARKDOWN = MarkdownIt("commonmark", {"html": False})


@dataclass(frozen=True)
class Shown:
    """A displayed block: Markdown for a notebook front end or a text reader, HTML (the same
    Markdown rendered) for JupyterLab, nbconvert and the book. `kind` "admonition important" is the
    theme's admonition, "dropdown" a collapsed <details> block, "" a plain paragraph."""

    markdown: str
    title: str = ""
    kind: str = ""
    evidence: Shown | None = None  # a collapsed block shown after this one
    tables: tuple[tuple[str, object], ...] = ()  # (caption, PageTable) after the text

    def _repr_markdown_(self) -> str:
        parts = [f"**{escaped(self.title)}**" if self.title else "", self.markdown,
                 *(f"*{escaped(caption)}*\n\n{pipe_table(table)}" for caption, table in self.tables),
                 self.evidence._repr_markdown_() if self.evidence else ""]
        return "\n\n".join(part for part in parts if part)

    def _repr_html_(self) -> str:
        return self._own_html() + (self.evidence._repr_html_() if self.evidence else "")

    def _own_html(self) -> str:
        body = _MARKDOWN.render(self.markdown) + "".join(
            f'<p class="caption"><em>{html.escape(caption)}</em></p>{table._repr_html_()}'
            for caption, table in self.tables)
        title = html.escape(self.title)
        if self.kind == "dropdown":
            return (f'<details class="sd-sphinx-override sd-dropdown sd-card sd-mb-3 evidence">'
                    f'<summary class="sd-summary-title sd-card-header">{title}</summary>'
                    f'<div class="sd-summary-content sd-card-body">{body}</div></details>')
        if self.kind:
            return f'<div class="{self.kind}"><p class="admonition-title">{title}</p>{body}</div>'
        return body

    def __repr__(self) -> str:
        return self._repr_markdown_()


@dataclass(frozen=True)
class Section:
    """A section's point (its first paragraph) and the detail behind it (a collapsed block): findings,
    plain texts shown as they are, and tables, each with its caption."""

    point: Finding
    evidence: tuple[Finding, ...] = ()
    details: tuple[str, ...] = ()
    tables: tuple[tuple[str, object], ...] = ()  # (caption, kvutils.report.tables.PageTable)


@dataclass(frozen=True)
class PageFindings:
    """What a chapter found: the answer to its question, the box's findings (at most 5) and each
    section's point and evidence, by the section's key."""

    answer: Finding
    box: tuple[Finding, ...]
    sections: dict[str, Section]

    def __post_init__(self):
        if not 1 <= len(self.box) <= 5:
            raise ValueError(f"PageFindings: the box holds 1 to 5 findings (got {len(self.box)})")

    def show_box(self) -> Shown:
        return FORMAT.box("What this chapter finds", list(self.box), self.answer)

    def show(self, key: str, title: str) -> Shown:
        """Section `key`: its point, then "Evidence: `title`" collapsed."""
        s = self.sections[key]
        lines = [f"- {FORMAT.bullet(f)}" for f in s.evidence] + [f"- {escaped(t)}" for t in s.details if t]
        evidence = Shown("\n".join(lines), title=f"Evidence: {title}", kind="dropdown", tables=s.tables)
        return Shown(FORMAT.bullet(s.point), evidence=evidence if lines or s.tables else None)


def captioned(*tables: tuple[str, object]) -> tuple[tuple[str, object], ...]:
    """A Section's tables, (caption, table) each, leaving out those a run did not produce (None)."""
    return tuple((caption, t) for caption, t in tables if t is not None)


def pipe_table(table) -> str:
    """A DataFrame as a Markdown pipe table (a notebook rerun's text), its row labels first."""
    def cell(value) -> str:
        return escaped(str(value)).replace("\n", " ")

    head = [table.index.name or ""] + [str(c) for c in table.columns]
    rows = [[label, *values] for label, values in zip(table.index, table.itertuples(index=False))]
    return "\n".join("| " + " | ".join(cell(v) for v in row) + " |"
                      for row in [head, ["---"] * len(head), *rows])


def pending() -> Shown:
    """What the findings box shows until the notebook's run has computed its findings."""
    return Shown("*The findings appear here once the notebook's run below has finished.*",
                 title="What this chapter finds", kind="admonition important")
