"""What every page shares: numbers as the book prints them (`fmt`, `fraction`), glued findings with
their key numbers in bold, the figure style and the checks that a figure reads at the column's
width, tables for the page (`page_table`, `rows_table`), and the note on where a model's weights
come from. Every number in the prose is formatted here from a results dict, never typed by hand."""
from __future__ import annotations

import html
import re

import pandas as pd

from kvutils.models.registry import EMBEDDED, TINY


def fmt(value, digits: int = 6) -> str:
    """A number as the book prints it: integers as is, floats to `digits` significant digits."""
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    if 1e4 <= abs(value) < 1e12:  # 13,860 reads better than 1.386e+04
        return f"{value:,.0f}"
    text = f"{value:.{digits}g}"
    return f"{value:,.0f}" if "e+" in text else text  # 1,047 rather than 1.05e+03


_NUMBER = re.compile(r"(?<![\w.\-−])[-−]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?:/\d+)?%?×?(?![\w])")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


_CLAUSE_END = re.compile(r"[;:.](?:\s|$)")


def clauses(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause of the text; a clause ends at ';', ':' or '.' before a space."""
    ends = [m.end() for m in _CLAUSE_END.finditer(text) if m.end() < len(text)] + [len(text)]
    return list(zip([0] + ends[:-1], ends))


def key_numbers(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause's key number: its first number outside parentheses. A clause
    whose numbers are all in parentheses (the details of a measurement) has none."""
    spans = []
    for start, end in clauses(text):
        clause = text[start:end]
        for m in _NUMBER.finditer(clause):
            before = clause[:m.start()]
            if before.count("(") == before.count(")"):
                spans.append((start + m.start(), start + m.end()))
                break
    return spans


def bold_numbers(text: str) -> str:
    """A glued finding as inline Markdown (for `{glue:md}`): the text escaped, and only each
    clause's key number (`key_numbers`) in bold, so that the page marks the measurement a sentence
    is about, not every number of a paragraph."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", text)
    out, done = [], 0
    for start, end in key_numbers(escaped):
        out += [escaped[done:start], f"**{escaped[start:end]}**"]
        done = end
    return "".join(out) + escaped[done:]


def glue_findings(prefix: str, texts: dict[str, str]) -> None:
    """Glue each text as Markdown with its key numbers in bold (`bold_numbers`; the notebook's
    prose uses `{glue:md}`)."""
    from IPython.display import Markdown
    from myst_nb import glue

    for key, text in texts.items():
        glue(f"{prefix}{key}", Markdown(bold_numbers(text)), display=False)


# Figures are shown at their natural size up to the width of the book's text column, and shrunk to
# fit beyond it. The column of the theme (pydata/sphinx-book: 60em at most, less the right sidebar)
# is about this wide on a 1440-px window; its small font is 0.875 rem.
COLUMN_PX = 760
SMALL_FONT_PX = 14.0  # axis labels and titles at least this once scaled
SMALLEST_TEXT_PX = 11.0  # tick labels, legends, annotations
FIGURE_RC = {"figure.dpi": 100, "axes.labelsize": 11, "axes.titlesize": 11, "figure.titlesize": 12,
             "xtick.labelsize": 9, "ytick.labelsize": 9, "legend.fontsize": 9}


def figure_style():
    """The rc settings every figure of the book is drawn with (a context manager)."""
    import matplotlib.pyplot as plt

    return plt.rc_context(FIGURE_RC)


def styled(plot):
    """Decorator: draw the figure under `figure_style()`."""
    import functools

    @functools.wraps(plot)
    def draw(*args, **kwargs):
        with figure_style():
            return plot(*args, **kwargs)
    return draw


def depth_fractions(values: list) -> list[float]:
    """Depth of each entry of a per-depth list whose first entry is the embeddings (0) and last the
    final layer (1), so models of 6, 18 and 30 layers share an axis."""
    n = len(values) - 1
    return [i / n for i in range(len(values))]


def shown_px_per_point(fig) -> float:
    """Pixels per font point as the page shows the figure: the inline PNG is cropped to its tight
    bounding box at the figure's dpi, then shrunk to the column if it is wider."""
    width_in = fig.get_tightbbox(fig.canvas.get_renderer()).width
    return fig.dpi / 72 * min(1.0, COLUMN_PX / (width_in * fig.dpi))


def illegible_text(fig) -> list[str]:
    """Every text of the figure that the page would show smaller than the book's small font (axis
    labels, titles) or than SMALLEST_TEXT_PX (everything else); empty when the figure reads well."""
    from matplotlib.text import Text

    fig.canvas.draw()  # tick labels get their text when drawn
    scale = shown_px_per_point(fig)
    main = {id(t) for ax in fig.axes for t in (ax.xaxis.label, ax.yaxis.label, ax.title)}
    if getattr(fig, "_suptitle", None) is not None:
        main.add(id(fig._suptitle))
    problems = []
    for t in fig.findobj(Text):
        if not t.get_visible() or not t.get_text().strip():
            continue
        need = SMALL_FONT_PX if id(t) in main else SMALLEST_TEXT_PX
        if t.get_fontsize() * scale < need - 1e-9:
            problems.append(f"{t.get_text()[:40]!r}: {t.get_fontsize() * scale:.1f} px < {need:g} px")
    return problems


# --------------------------------------------------------------------------- tables for the page

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
        rows.append(f'<tr><th class="{LABEL_CLASS}" title="{html.escape(text, quote=True)}">{shown}</th>{cells}</tr>')
    return (f'<table class="dataframe {TABLE_CLASS}">\n<thead><tr><th class="{LABEL_CLASS}">{index_name}</th>{head}'
            f'</tr></thead>\n<tbody>\n' + "\n".join(rows) + "\n</tbody>\n</table>")


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


def overlapping_text(fig) -> list[str]:
    """Every pair of labelled ticks on one axis of the figure whose labels overlap as drawn (e.g. the
    minor-tick labels matplotlib adds to a log axis spanning less than two decades); empty when
    none do."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            ticks = axis.get_major_ticks() + axis.get_minor_ticks()
            labels = [t.label1 for t in ticks if low <= t.get_loc() <= high and t.label1.get_visible()
                      and t.label1.get_text().strip()]
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels]
            problems += [f"{a!r} overlaps {b!r}" for i, (a, box_a) in enumerate(boxes)
                         for b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]
    return problems


def rows_table(rows: dict[str, dict[str, str]], index: str = "metric") -> PageTable:
    """{row: {column: text}} as a table for the page (`page_table`), "—" where a column has no value
    for a row."""
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = index
    return page_table(table)


def fraction(count: int, total: int) -> str:
    return f"{count}/{total}"


_GGUF_ORIGIN = re.compile(r"\(([^()]*GGUF[^()]*)\)")


def weights_origin(name: str) -> str:
    """Where a model's weights come from, read from the registry (kvutils.models.registry): for an embedded
    GGUF model the quantisation its file was published in ("Q4_K_M GGUF, dequantised to fp32")."""
    if name in EMBEDDED:
        found = _GGUF_ORIGIN.search(EMBEDDED[name].description)
        return (f"{name}: {found.group(1)}" if found else
                f"{name}: weights as its package ships them ({EMBEDDED[name].install})")
    if name in TINY:
        return f"{name}: random weights (seeded), not quantised"
    return f"{name}: weights as stored in its files"


def weights_note(names) -> str:
    """One sentence for a page that compares precisions: the weights every run computes with."""
    origins = [weights_origin(n) for n in dict.fromkeys(names)]
    quantised = any("GGUF" in o for o in origins)
    return ("Weights: " + "; ".join(origins)
            + (". Every precision compared here (fp64, fp32, the cache's own casts) is applied to these "
               "dequantised weights: the GGUF quantisation of the weights is part of the model, not of the cache"
               if quantised else ""))
