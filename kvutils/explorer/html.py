"""The attention explorer in the page itself: no kernel, no network.

`explorer_view(payload, ...)` (payload from `kvutils.explorer.data.pack`) returns a `Chart` whose
HTML is one element `id="attention-explorer"` holding

- form controls a reader (or a browser test) drives: `<select>` for model, word, text and head,
  `<input type="range">` for layer and query;
- one Plotly figure: the two texts' attention heat maps (every query row, the chosen query row
  outlined, the differing span's columns framed) over the chosen query's bar charts (the first
  token red, the differing span orange), as the live widget (`kvutils.explorer.widgets`) draws them;
- the recorded weights (8-bit, gzip'd) in a `<script type="application/json">`, unpacked by
  `explorer.js` with the browser's own DecompressionStream.

The page needs plotly.js, which the Sphinx extension `kvutils.book.plotly_static` serves from `_static/`.
"""
from __future__ import annotations

import html
from pathlib import Path

from kvutils.report.interactive import MARKER_CLASS, NO_PLOTLY, Chart, script_json

ROOT_ID = "attention-explorer"
SCRIPT = Path(__file__).with_name("explorer.js")
LEGEND = ("Heat maps: every query row of each text (red frame: the chosen query; dotted orange: the span "
          "where the two texts differ). Bars: the chosen query's weights (red: the first token, where "
          "attention sinks; orange: the differing span).")
HEIGHT = 760  # px: two rows of plots with rotated token labels


def layout() -> dict:
    """The figure's frame (axes, titles, colour axis); explorer.js fills in the data and labels."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=2, vertical_spacing=0.2, horizontal_spacing=0.08,
                        row_heights=[0.55, 0.45], subplot_titles=["A", "B", "query of A", "query of B"])
    for col in (1, 2):  # the right column's y axes mean the same as the left's: titled once
        fig.update_xaxes(title_text="key token", row=1, col=col, tickangle=-90)
        fig.update_yaxes(title_text="query token" if col == 1 else None, autorange="reversed", row=1, col=col)
        fig.update_xaxes(title_text="key token", row=2, col=col, tickangle=-90)
        fig.update_yaxes(title_text="attention weight" if col == 1 else None, rangemode="tozero", row=2,
                         col=col)
    fig.update_annotations(font_size=10)
    fig.update_layout(height=HEIGHT, template="plotly_white", showlegend=False, margin={"t": 70, "b": 60,
                                                                                        "l": 60, "r": 10},
                      coloraxis={"colorscale": "Viridis", "cmin": 0, "colorbar": {
                          "title": {"text": "weight", "side": "right"}, "thickness": 10, "len": 0.5, "y": 1,
                          "yanchor": "top"}},
                      title={"text": "Attention of one query token", "font": {"size": 14}})
    return fig.to_plotly_json()["layout"]


def weight_note(payload: dict) -> str:
    """What the view carries: its own size, so the page says it rather than a hand-typed number."""
    models = payload["models"]
    words = len(models[0]["pairs"])
    return (f"Recorded at build time for {len(models)} model(s) x {words} word pairs x "
            f"{len(payload['constructions'])} texts: {payload['raw_bytes'] / 1e3:,.0f} kB of weights, 8-bit "
            f"(within 0.002 of the model's), {len(payload['blob']) / 1e3:,.0f} kB in this page once "
            "compressed.")


def _select(name: str, label: str) -> str:
    return f'<label>{label} <select data-control="{name}" aria-label="{label}"></select></label>'


def _range(name: str, label: str) -> str:
    return (f'<label>{label} <input type="range" data-control="{name}" aria-label="{label}" min="0" max="0" '
            f'step="1" value="0"> <output data-show="{name}"></output></label>')


def explorer_view(payload: dict, *, word: str, layer: int, model: str | None = None,
                  construction: str = "repeat") -> Chart:
    """The offline explorer, first showing `model` (default: the first), `word`, `construction`
    and `layer` (1-based; capped at the model's depth), the head mean and the last token as query."""
    names = [m["name"] for m in payload["models"]]
    model = model or names[0]
    if model not in names:
        raise ValueError(f"model: {model!r} was not recorded; choose one of {names}")
    if word not in payload["models"][0]["pairs"]:
        raise ValueError(f"word: {word!r} was not recorded; choose one of "
                         f"{list(payload['models'][0]['pairs'])}")
    if construction not in payload["constructions"]:
        raise ValueError(f"construction: {construction!r}; choose one of {list(payload['constructions'])}")
    initial = {"model": model, "word": word, "construction": construction, "layer": layer, "head": "mean",
               "query": 0}
    data = script_json({**payload, "layout": layout(), "initial": initial})
    controls = "\n".join([_select("model", "model"), _select("word", "word"), _select("construction", "text"),
                          _range("layer", "layer"), _select("head", "head"), _range("query", "query ← end")])
    page = (
        f'<div id="{ROOT_ID}" class="{MARKER_CLASS}" data-no-plotly="{html.escape(NO_PLOTLY)}">\n'
        '<form class="ae-controls" style="display:flex;flex-wrap:wrap;gap:0.4em '
        f'1.2em;margin-bottom:0.5em">\n{controls}\n</form>\n'
        f'<div class="ae-texts" style="font-size:0.85em"></div>\n'
        f'<p class="ae-weight" style="font-size:0.8em">{LEGEND} {html.escape(weight_note(payload))}</p>\n'
        f'<div class="ae-plot" style="width:100%;min-height:{HEIGHT}px"></div>\n'
        f'<script type="application/json" class="ae-data">{data}</script>\n'
        f'<script>\n{SCRIPT.read_text()}\n</script>\n</div>')
    return Chart(None, page)
