"""The offline interactive charts: a DataFrame becomes a Plotly scatter with hover text, drawn by
the plotly.js that the book serves from _static (only on pages that hold a chart)."""
import base64
import json

import numpy as np
import pandas as pd
import pytest

from kvutils.book import plotly_static
from kvutils.report import interactive


@pytest.fixture
def frame():
    return pd.DataFrame({"op": ["exact", "quantize_kivi:bits=4", "window:size=128,sinks=4"],
                         "cache MB": [12.0, 3.1, 1.5], "KL (nats)": [0.0, 0.012, 0.31], "top-1 (%)": [100.0, 98.4, 81.2]})


def _spec(chart):
    return json.loads(chart.html.split("const spec = ")[1].split(";\n")[0])


def _values(array) -> list:
    """Plotly writes numeric arrays as typed base64 ({"dtype", "bdata", "shape"}); plotly.js reads both."""
    if isinstance(array, dict) and "bdata" in array:
        values = np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
        shape = [int(n) for n in str(array.get("shape", len(values))).split(",")]
        return values.reshape(shape).tolist()
    return list(array)


def test_scatter_puts_every_row_and_its_hover_columns_in_the_page(frame):
    chart = interactive.scatter(frame, "cache MB", "KL (nats)", hover=["op", "top-1 (%)"], color="op",
                                title="Fidelity against cache size (tiny-llama)", x_label="cache size (MB)",
                                y_label="mean KL (nats)", log_x=True)
    spec = _spec(chart)
    points = {(x, y) for trace in spec["data"] for x, y in zip(_values(trace["x"]), _values(trace["y"]))}
    assert points == set(zip(frame["cache MB"], frame["KL (nats)"]))
    hovers = " ".join(trace["hovertemplate"] for trace in spec["data"])
    assert "op=" in hovers and "top-1 (%)=" in hovers
    assert {tuple(c) for trace in spec["data"] for c in _values(trace["customdata"])} == set(zip(frame["op"], frame["top-1 (%)"]))
    assert spec["layout"]["xaxis"]["type"] == "log"
    assert spec["layout"]["xaxis"]["title"]["text"] == "cache size (MB)"
    assert "tiny-llama" in spec["layout"]["title"]["text"]
    assert f'class="{interactive.MARKER_CLASS}"' in chart.html and "https://" not in chart.html


def test_the_same_data_make_the_same_page(frame):
    make = lambda: interactive.scatter(frame, "cache MB", "KL (nats)", title="t (m)", x_label="x (MB)",  # noqa: E731
                                       y_label="y (nats)").html
    assert make() == make()


@pytest.mark.parametrize("change, message", [(dict(title=" "), "title"), (dict(x="nope"), "nope"),
                                             (dict(hover=["gone"]), "gone")])
def test_scatter_names_what_is_wrong(frame, change, message):
    arguments = {**dict(x="cache MB", y="KL (nats)", title="t (m)", x_label="x (MB)", y_label="y (nats)"), **change}
    with pytest.raises(ValueError, match=message):
        interactive.scatter(frame, **arguments)


def test_plotly_js_goes_only_to_pages_with_a_chart():
    added = []

    class App:
        def add_js_file(self, name):
            added.append(name)

    plotly_static.plotly_where_used(App(), "a", "page.html", {"body": "<p>no chart</p>"}, None)
    assert added == []
    plotly_static.plotly_where_used(App(), "b", "page.html", {"body": f'<div class="{interactive.MARKER_CLASS}">'}, None)
    assert added == [interactive.PLOTLY_JS]
    assert interactive.plotly_js_path().stat().st_size > 1_000_000  # the real bundle, shipped by the package
