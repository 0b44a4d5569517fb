"""What makes the book's tables, charts and findings readable in a narrow column (issue 19, item 6),
checked without a browser: tables whose row labels wrap (a short label with the full one as a
tooltip where asked), interactive charts laid out for the column, log ticks that do not overlap,
nothing bold but a finding's claim. tests/book/test_browser.py checks the built pages themselves."""
import re

import pandas as pd
import pytest

from kvutils.report import cache_approximations as report_costs
from kvutils.report import figures, interactive, tables, text

SPEC = "quantize_kivi:bits=4,group=32,residual=128"


@pytest.fixture
def table():
    frame = pd.DataFrame({"tiny-llama": ["0.0643 · 86.30 · 17.87", "0 · 100 · 16.9"], "cache KiB": [12.5, 50.0]},
                         index=[SPEC, "exact"])
    frame.index.name = "operation (KL nats · top-1 % · perplexity)"
    return frame


def test_a_page_table_is_the_same_data(table):
    """Callers index it as the DataFrame it was made from (tests and the prose read Table 2 by spec)."""
    shown = tables.page_table(table)
    assert isinstance(shown, pd.DataFrame)
    pd.testing.assert_frame_equal(pd.DataFrame(shown), table)
    assert shown.loc[SPEC, "tiny-llama"] == "0.0643 · 86.30 · 17.87"
    assert isinstance(shown.sort_index(), tables.PageTable)  # still shown as a page table after sorting


def test_a_page_table_row_label_wraps_and_keeps_its_full_text(table):
    """An op spec has no space to wrap at, so a plain DataFrame's label cell is as wide as the whole
    spec: the label carries <wbr> after ':' and ',' and the full spec as its tooltip."""
    html = tables.page_table(table)._repr_html_()
    row = re.search(rf'<th class="{tables.LABEL_CLASS}" title="{re.escape(SPEC)}">(.*?)</th>', html).group(1)
    assert row == "quantize_<wbr>kivi:<wbr>bits=4,<wbr>group=32,<wbr>residual=128"
    assert re.sub("<wbr>", "", row) == SPEC  # the text itself unchanged
    assert "<td>0.0643 · 86.30 · 17.87</td><td>12.5</td>" in html  # every cell whole
    assert f'class="dataframe {tables.TABLE_CLASS}"' in html and "operation (KL nats" in html


def test_a_short_label_shows_with_the_full_one_as_its_tooltip(table):
    html = tables.page_table(table, short={SPEC: "KIVI int4"})._repr_html_()
    assert f'title="{SPEC}">KIVI int4</th>' in html
    assert html.count("<tr>") == 3  # header and both rows: none dropped


def test_labels_and_cells_are_escaped():
    html = tables.page_table(pd.DataFrame({"a": ["x<y"]}, index=["<b>"]))._repr_html_()
    assert "<b>" not in html and "&lt;b&gt;" in html and "x&lt;y" in html


def test_chapter_tables_are_page_tables():
    """Table 2 and the bytes table go to the page as page tables (the frontier table should too)."""
    rows = [{"model": "m", "attention": "GQA", "layers": 2, "kv_heads": 1, "head_dim": 4, "kib_per_token": 1.0,
             "gib_per_128k": 0.125, "source": "ours"}]
    assert isinstance(report_costs.bytes_table(rows), tables.PageTable)
    assert isinstance(tables.rows_table({"r": {"c": "1"}}), tables.PageTable)


def test_appendix_notes_are_glued_as_written_with_nothing_bold(monkeypatch):
    """The appendices' sentences go to the page as Markdown that shows them literally: no number is
    picked out in bold by a pattern (a page's bold is its findings' claims, kvutils.report.findings)."""
    import myst_nb

    glued = {}
    monkeypatch.setattr(myst_nb, "glue",
                        lambda name, value, display=True: glued.__setitem__(name, value.data))
    text.glue_markdown("rep_", {"runs": "24/24 identical on gemma3-270m (max 0.0470581)",
                                "tok": "token '<bos>' a_b"})
    assert glued == {"rep_runs": "24/24 identical on gemma3-270m (max 0.0470581)",
                     "rep_tok": "token '\\<bos\\>' a\\_b"}  # Markdown-escaped
    assert not hasattr(text, "bold_numbers")


def _bytes_rows(values: dict[str, float]) -> list[dict]:
    return [{"model": name, "gib_per_128k": v, "source": "published" if v > 4 else "ours"} for name, v in values.items()]


@pytest.mark.parametrize("values", [
    {"Pythia-160M": 4.5, "Llama-3.1-8B": 16.0, "Llama-3.1-8B, MHA": 64.0, "smollm2-135m": 2.8125, "gemma3-270m": 2.25},
    {"Pythia-160M": 4.5, "Llama-3.1-8B, MHA": 64.0, "tiny-llama": 0.03125}])
def test_the_bytes_chart_log_ticks_do_not_overlap(values):
    """The full book's range (2.25 to 64 GiB, under two decades) made matplotlib label its minor log
    ticks (2×10⁰, 3×10⁰, 4×10⁰, ...), which overlapped; the quick book's wide range did not show it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = report_costs.plot_bytes(_bytes_rows(values))
    assert figures.overlapping_text(fig) == []
    assert figures.illegible_text(fig) == []
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert all(re.fullmatch(r"[\d.]+", t) for t in labels), labels  # plain numbers
    plt.close(fig)


def test_overlapping_tick_labels_are_caught():
    """The check itself: matplotlib's default log axis over 2.25-64 labels its minor ticks, overlapping."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with figures.figure_style():
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        ax.barh(["a", "b", "c"], [2.25, 4.5, 64.0])
        ax.set_xscale("log")
        assert figures.overlapping_text(fig)
    plt.close(fig)


def _spec(chart) -> dict:
    import json

    return json.loads(chart.html.split("const spec = ")[1].split(";\n")[0])


def test_an_interactive_chart_is_laid_out_for_the_column():
    """Chapter 5's chart was squeezed to ~150 px by a legend of long entries at the right, its title
    and x-axis title cut at the edge. Every chart now: autosized, title and axis titles wrapped to
    lines that fit MIN_WIDTH_PX, legend entries wrapped so that the plot keeps its width."""
    frame = pd.DataFrame({"time": [1.0, 2.0, 3.0], "acc": [50.0, 60.0, 70.0], "model": ["tiny-qwen3"] * 3,
                          "policy": ["tail with the tail patch (recompute from layer k)", "stale reuse of the cache",
                                     "activated adapter of the same k"]})
    long_title = "Held-out accuracy against the cost of the switch — models: smollm2-135m, gemma3-270m, tiny-qwen3"
    chart = interactive.scatter(frame, "time", "acc", color="policy", symbol="model", title=long_title,
                                x_label="time of the switch (% of a full recompute under the adapter)",
                                y_label="held-out accuracy (%)")
    layout = _spec(chart)["layout"]
    assert layout["autosize"] is True and "width" not in layout
    lines = layout["title"]["text"].split("<br>")
    assert len(lines) > 1 and all(len(line) <= interactive.TITLE_CHARS for line in lines)
    assert " ".join(lines) == long_title  # wrapped, not cut
    x_title = layout["xaxis"]["title"]["text"].split("<br>")
    assert all(len(line) <= interactive.X_TITLE_CHARS for line in x_title) and len(x_title) == 2
    assert layout["xaxis"]["automargin"] and layout["yaxis"]["automargin"]
    # room for every title line above the plot
    assert layout["margin"]["t"] >= interactive.TITLE_TOP_PX + interactive.TITLE_LINE_PX * len(lines)
    for trace in _spec(chart)["data"]:
        assert all(len(line) <= interactive.LEGEND_CHARS for line in trace["name"].split("<br>")), trace["name"]
    assert "width:100%" in chart.html


def test_wrap_keeps_every_word():
    assert interactive.wrap("a b c", 3) == "a b<br>c"
    assert interactive.wrap("averyveryverylongword x", 5) == "averyveryverylongword<br>x"
    assert interactive.wrap("one<br>two three", 20) == "one<br>two three"
    assert interactive.wrap(None, 5) is None


def test_a_legend_over_the_bars_and_a_label_past_its_axes_are_caught():
    """The defects of issue 37's figures: a legend drawn over the last bar, a value label above the
    top of its axes; and the same chart with the legend below the axes and room for the label passes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvutils.report import figures

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([0, 1, 2], [1, 2, 10], label="bars")
    ax.text(2, 11, "46.3×", ha="center")  # above the autoscaled top (10.5)
    ax.legend(loc="upper right")  # over the tallest bar
    problems = figures.covered_or_clipped(fig)
    assert any("legend covers bar 2" in p for p in problems) and any("'46.3×' reaches past" in p for p in problems)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([0, 1, 2], [1, 2, 10], label="bars")
    ax.text(2, 11, "46.3×", ha="center")
    ax.set_ylim(0, 14)
    fig.tight_layout()
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0))
    assert figures.covered_or_clipped(fig) == []
    plt.close(fig)
