"""Tables for the page: every row label, header and cell wraps at the column's width
(`page_table`, `rows_table`), a long row label may show a short one with the full one as its tooltip."""
from __future__ import annotations

import html
import re

import pandas as pd

from kvutils.core import compare
from kvutils.report.text import fmt

TABLE_CLASS = "kvutils-table"  # book/_static/custom.css: the table fits the column, its labels wrap
LABEL_CLASS = "kvutils-label"
_BREAK_AFTER = re.compile(r"([:,/_])(?=[^\s\d])")  # where long text may wrap: after : , / _ (not 49,505)


def label_html(label: str) -> str:
    """Text for a table cell as HTML that may wrap after ':', ',', '/' and '_' where a word follows
    (an op spec such as 'quantize_kivi:bits=4,group=32,residual=128' has no space to wrap at; a
    number such as 49,505 stays whole), its text unchanged."""
    return _BREAK_AFTER.sub(r"\1<wbr>", html.escape(label))


def table_html(table: pd.DataFrame, short: dict[str, str] | None = None) -> str:
    """The table as the page shows it: each row label, header and cell wrappable (`label_html`),
    a row label shortened to `short[label]` where given, the full label its tooltip (the title
    attribute). Every row and every cell is shown whole."""
    short = short or {}
    head = "".join(f"<th>{label_html(str(c))}</th>" for c in table.columns)
    index_name = html.escape(str(table.index.name or ""))
    rows = []
    for label, values in zip(table.index, table.itertuples(index=False)):
        text = str(label)
        shown = html.escape(short[text]) if text in short else label_html(text)
        cells = "".join(f"<td>{label_html(_cell_text(v))}</td>" for v in values)
        rows.append(f'<tr><th class="{LABEL_CLASS}" '
                    f'title="{html.escape(text, quote=True)}">{shown}</th>{cells}</tr>')
    return (f'<table class="dataframe {TABLE_CLASS}">\n<thead><tr><th '
            f'class="{LABEL_CLASS}">{index_name}</th>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(rows) + "\n</tbody>\n</table>")


def _cell_text(value) -> str:
    return fmt(value) if isinstance(value, float) else str(value)


class PageTable(pd.DataFrame):
    """A DataFrame that a notebook shows as `table_html` renders it (labels that wrap, short labels
    with the full one as a tooltip); as data it is the DataFrame it was made from."""

    _metadata = ["short_labels"]

    @property
    def _constructor(self):
        return PageTable

    def _repr_html_(self) -> str:
        return table_html(self, getattr(self, "short_labels", None))


def page_table(table: pd.DataFrame, short: dict[str, str] | None = None) -> PageTable:
    """`table` for the page (`PageTable`): its row labels wrap at the column's width, and where
    `short` maps a full row label to a short one, the short one is shown with the full one as a
    tooltip. The data, index and columns are those of `table`."""
    out = PageTable(table)
    out.short_labels = dict(short or {})
    return out


def rows_table(rows: dict[str, dict[str, str]], index: str = "metric") -> PageTable:
    """{row: {column: text}} as a table for the page (`page_table`), "—" where a column has no value
    for a row."""
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = index
    return page_table(table)


def verdict_text(test) -> str:
    """A paired test's verdict, in the words of a table cell."""
    if test.verdict in (compare.A_LOWER, compare.A_HIGHER):
        return f"{test.a} {'lower' if test.verdict == compare.A_LOWER else 'higher'}"
    return {compare.CANNOT: "cannot separate at this n"}.get(test.verdict, test.verdict)


def tests_table(tests: dict, index: str = "comparison") -> PageTable:
    """Paired tests (`kvutils.core.compare.Paired`), one row each: n, the mean difference a − b with
    its 95 % interval (paired bootstrap), the exact sign test's p and the verdict both give."""
    rows = {}
    for label, t in tests.items():
        interval = f" [{t.ci95[0]:+.3g}, {t.ci95[1]:+.3g}]" if t.ci95 is not None else ""
        rows[label] = {"n": f"{t.n} {t.unit}",
                       "difference a − b [95 % interval]": f"{t.effect:+.3g}{interval}",
                       "p (sign test)": f"{t.p:.2g}", "verdict": verdict_text(t)}
    return rows_table(rows, index)
