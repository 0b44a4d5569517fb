"""Interactive charts in the static book, offline: Plotly figures drawn by the plotly.js that ships
inside the `plotly` Python package, served from the book's own `_static/` (no CDN, no kernel; it
works from `file://`).

`scatter(df, x, y, ...)` turns a DataFrame into an interactive scatter with hover text. A
notebook cell that ends with the returned `Chart` shows it (text/html). Chapter 4's
fidelity-vs-bytes chart, for example::

    from kvutils.report import interactive
    interactive.scatter(table2, x="cache MB", y="KL (nats)", color="op", symbol="model",
                        hover=["op spec", "KL (nats)", "top-1 (%)", "cache MB"], log_x=True,
                        title="Fidelity against cache size (smollm2-135m, 16 documents)",
                        x_label="cache size (MB)", y_label="mean KL from the exact cache (nats)")

and chapter 5's quality-vs-cost chart the same way. Keep saving the static PNG (matplotlib)
into the results folder for papers; the chart is for readers of the page.

The Sphinx extension `kvutils.book.plotly_static` (listed in `_config.yml`) copies plotly.min.js
into `_static/` once and adds it to exactly the pages whose body holds a chart (`MARKER_CLASS`),
so the other pages do not carry its 4.8 MB.

`Chart.html` is a `<div>` plus a small script; with no plotly.js on the page (a notebook opened
in Jupyter, where this book's extension does not run) the div says so instead of failing.
"""
from __future__ import annotations

import hashlib
import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape as html_escape
from pathlib import Path

MARKER_CLASS = "kvutils-plotly"  # pages whose body contains it get plotly.min.js
PLOTLY_JS = "plotly.min.js"
NO_PLOTLY = "This interactive chart needs plotly.js, which the built book serves; open the book's HTML."


def plotly_js_path() -> Path:
    """plotly.js as the installed plotly package ships it (no download)."""
    import plotly

    path = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not path.is_file():
        raise RuntimeError(f"the plotly package at {path.parent.parent} ships no {PLOTLY_JS}; reinstall "
                           "plotly")
    return path


def element_id(prefix: str, content: str) -> str:
    """An id from the content, so that the same results make the same page (plotly's own are random)."""
    return f"{prefix}-{hashlib.sha256(content.encode()).hexdigest()[:12]}"


def script_json(value) -> str:
    """JSON safe to put inside a <script> element (no '</script>' can close it early)."""
    from plotly.utils import PlotlyJSONEncoder

    return json.dumps(value, cls=PlotlyJSONEncoder, separators=(",", ":")).replace("<", "\\u003c")


@dataclass(frozen=True)
class Chart:
    """One interactive Plotly chart for a page: `html` is what the page shows; `figure` the Plotly
    figure (e.g. `figure.write_image` where kaleido is installed)."""

    figure: object  # plotly.graph_objects.Figure
    html: str

    def _repr_html_(self) -> str:
        return self.html


# Text sizes in characters that fit a chart of MIN_WIDTH_PX (the page column on a phone-width
# window) at Plotly's default fonts: longer titles, axis titles and legend entries are wrapped
# onto more lines (<br>) instead of running past the chart's edge, where Plotly cuts them.
MIN_WIDTH_PX = 600
TITLE_CHARS = 60
X_TITLE_CHARS = 55
Y_TITLE_CHARS = 42  # the y-axis title runs along the plot's height
LEGEND_CHARS = 24  # a legend at the right takes what its longest entry needs from the plot's width
TITLE_FONT_PX = 16
TITLE_LINE_PX = 21  # Plotly's line spacing, 1.3 em
TITLE_TOP_PX = 24  # Plotly draws a top-anchored title of several lines about 15 px above its anchor
DEFAULT_HEIGHT_PX = 450  # Plotly's, where a figure sets none


def wrap(text: str | None, width: int) -> str | None:
    """`text` broken at spaces into lines of at most `width` characters (a longer word keeps its own
    line), joined with Plotly's <br>; existing <br> breaks are kept."""
    if not text:
        return text
    return "<br>".join(line for part in text.split("<br>")
                       for line in textwrap.wrap(part, width, break_long_words=False,
                                                 break_on_hyphens=False) or [""])


def fit_to_column(figure) -> None:
    """Lay the figure out for the page column (in place): as wide as the column (autosize, no fixed
    width), its title, axis titles and legend entries wrapped to fit MIN_WIDTH_PX, the title at the
    top left with room above the plot, and margins that grow to hold tick labels and axis titles."""
    layout = figure.layout
    height = layout.height or DEFAULT_HEIGHT_PX
    title = wrap(layout.title.text, TITLE_CHARS)
    lines = title.count("<br>") + 1 if title else 0
    figure.update_layout(autosize=True, width=None,
                         title={"text": title, "x": 0.01, "xanchor": "left", "yref": "container",
                                "yanchor": "top",
                                "y": 1 - TITLE_TOP_PX / height, "font": {"size": TITLE_FONT_PX}},
                         margin={"t": TITLE_TOP_PX + TITLE_LINE_PX * lines + 12, "l": 10, "r": 10, "b": 10,
                                 "autoexpand": True})
    figure.for_each_xaxis(lambda axis: axis.update(automargin=True, title_text=wrap(axis.title.text,
                                                                                    X_TITLE_CHARS)))
    figure.for_each_yaxis(lambda axis: axis.update(automargin=True, title_text=wrap(axis.title.text,
                                                                                    Y_TITLE_CHARS)))
    figure.for_each_trace(lambda trace: trace.update(name=wrap(trace.name, LEGEND_CHARS)))
    if layout.legend.title.text:
        figure.update_layout(legend_title_text=wrap(layout.legend.title.text, LEGEND_CHARS))


def chart(figure, config: dict | None = None) -> Chart:
    """Any Plotly figure as an offline chart of the page, laid out to fit the column (a copy of it,
    through `fit_to_column`)."""
    import plotly.graph_objects as go

    figure = go.Figure(figure)
    fit_to_column(figure)
    spec = script_json({"data": figure.to_plotly_json()["data"], "layout": figure.to_plotly_json()["layout"],
                        "config": {"displaylogo": False, "responsive": True, **(config or {})}})
    div = element_id("kvutils-chart", spec)
    alt = html_escape(f"Interactive chart: {figure.layout.title.text or 'untitled'}".replace("<br>", " "))
    html = (f'<div id="{div}" class="{MARKER_CLASS}" role="img" aria-label="{alt}" '
            f'style="width:100%;max-width:100%;min-height:{figure.layout.height or 450}px">'
            f'</div>\n<script>(function () {{\n  const el = document.getElementById("{div}");\n'
            f'  if (!window.Plotly) {{ el.textContent = {json.dumps(NO_PLOTLY)}; return; }}\n'
            f'  const spec = {spec};\n  Plotly.newPlot(el, spec.data, spec.layout, '
            'spec.config);\n})();</script>')
    return Chart(figure, html)


def scatter(df, x: str, y: str, *, title: str, x_label: str, y_label: str, hover: Sequence[str] = (),
            color: str | None = None, symbol: str | None = None, log_x: bool = False, log_y: bool = False,
            height: int = 480) -> Chart:
    """An interactive scatter of a DataFrame's rows: one point per row at (x, y), coloured and
    shaped by the `color` and `symbol` columns, and the `hover` columns (names and values) shown on
    hover. `title` should say which model(s) made the data; labels carry the units."""
    import plotly.express as px

    for name, value in (("title", title), ("x_label", x_label), ("y_label", y_label)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{name}: every chart needs one (a non-empty string); got {value!r}")
    columns = [x, y, *hover, *(c for c in (color, symbol) if c is not None)]
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the DataFrame; it has {list(df.columns)}")
    if df.empty:
        raise ValueError("df: no rows to plot")
    figure = px.scatter(df, x=x, y=y, color=color, symbol=symbol, hover_data=list(hover), log_x=log_x,
                        log_y=log_y,
                        title=title, labels={x: x_label, y: y_label}, height=height, template="plotly_white")
    figure.update_traces(marker={"size": 10, "line": {"width": 1, "color": "white"}})
    return chart(figure)
