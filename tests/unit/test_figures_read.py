"""Figures that read (issue 50, item 6): no title, axis label or tick label over another, no legend
over a curve, and every figure of every notebook with an alt text that says what it shows. The
figures are drawn from a full build's results (tests/data/full_build), where the defects showed."""
import ast
import gzip
import html
import json
import re
from pathlib import Path

import pytest

from kvutils.core.catalog import NOTEBOOKS
from kvutils.report import figures

ROOT = Path(__file__).parents[2]
FULL_BUILD = ROOT / "tests" / "data" / "full_build"
PLOT_NAMES = re.compile(r"\b(fig|\w+_fig|figures\[.+\]|\w+_chart\(.*\)|plot_\w+\(.*\))$")


@pytest.fixture(scope="module")
def plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


@pytest.fixture(scope="module")
def runs():
    return {name: json.loads(gzip.decompress((FULL_BUILD / f"{name}.json.gz").read_bytes()))
            for name in NOTEBOOKS.values()}


def test_overlapping_titles_and_labels_are_caught(plt):
    """Each kind of overlap the issue saw, drawn on purpose: two panel titles too long for their
    column, a suptitle over the first panel's title, an x label over the panel below's title."""
    with figures.figure_style():
        fig, axes = plt.subplots(2, 2, figsize=(6, 5))
        long = "gemma3-270m, evicts 25 %: tau = -0.15 [-0.26, +0.26] over 72 questions"
        axes[0, 0].set_title(long)
        axes[0, 1].set_title(long)
        axes[0, 0].set_xlabel("mean KL from the exact cache\n(nats, log scale)\nthird line\nfourth line")
        axes[1, 0].set_title("below")
        fig.suptitle("A suptitle with no room", y=0.95)
        problems = figures.overlapping_text(fig)
    assert any("axes 0 title" in p and "axes 1 title" in p for p in problems), problems
    assert any(p.startswith("suptitle") and "axes 0 title" in p for p in problems), problems
    assert any("axes 0 x label" in p and "axes 2 title" in p for p in problems), problems
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))  # the guide's defect: a title printed over its first panel
    fig.suptitle("Decision guide", y=0.8)
    assert any("is drawn over the plot of axes 0" in p for p in figures.overlapping_text(fig))
    plt.close(fig)
    with figures.figure_style():  # the same panels laid out: nothing caught
        fig, axes = plt.subplots(2, 2, figsize=(6, 5))
        for ax in axes.flat:
            ax.set_title("short")
            ax.set_xlabel("x (units)")
        fig.suptitle("A suptitle")
        fig.tight_layout()
        assert figures.overlapping_text(fig) == []
    plt.close(fig)


def test_a_legend_over_a_curve_is_caught(plt):
    """Chapter 5's defect: the legend inside the axes hid the spike of one loss curve."""
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(range(10), [0.5] * 9 + [1.4], label="k = 4")  # the spike at the top right
    ax.plot(range(10), [0.2] * 10, label="k = 8")
    ax.legend(loc="upper right")
    assert any("plotted point(s)" in p for p in figures.covered_or_clipped(fig))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    assert figures.covered_or_clipped(fig) == []
    plt.close(fig)


def _with_followups(retrieval: dict) -> dict:
    """The full build's retrieval with two follow-ups per real-text prompt, each a copy of the prompt's
    turn 1 record: the follow-up figure's shape at the full build's size (21 methods, 2 models), for
    its layout (the full build in tests/data predates the follow-ups)."""
    import copy

    out = copy.deepcopy(retrieval)
    for per_hay in out.values():
        hay = per_hay.get("pydoc")
        if not isinstance(hay, dict):
            continue
        hay["gate_followups"] = dict(hay["gate"])
        hay["exact"]["followups"] = {"per_prompt": [[r, r] for r in hay["exact"]["per_prompt"]]}
        for entry in hay["ops"].values():
            for regime in ("aware", "agnostic"):
                entry[regime]["followups"] = {"per_prompt": [[r, r] for r in entry[regime]["per_prompt"]],
                                              "construction_losses": {"questions": [], "correct": 0}}
    return out


def _book_figures(runs: dict) -> dict:
    """Every figure the notebooks draw, from the full build's results (as the notebooks call them)."""
    from kvutils.report import (
        appendix,
        bert_contrast,
        cache_approximations,
        cache_exactness,
        conclusions,
        followups,
        frontier,
        qwen3_switch,
        retrieval,
        sense_probes,
    )

    n = {name[:2]: r["numbers"] for name, r in runs.items()}
    ch4, model = n["04"], next(iter(n["04"]["table2"]))
    bench = json.loads(gzip.decompress((FULL_BUILD / "bench.json.gz").read_bytes()))
    return {"chapter 1": lambda: cache_exactness.plot_chapter1(n["01"]),
            "chapter 2": lambda: bert_contrast.plot_chapter2(n["02"]),
            "chapter 3 probe": lambda: sense_probes.plot_chapter3_probe(n["03"]),
            "chapter 3 attention": lambda: sense_probes.plot_chapter3_attention(n["03"]),
            "chapter 4 decode": lambda: cache_approximations.plot_decode(ch4["decode"]),
            "chapter 4 bytes": lambda: cache_approximations.plot_bytes(ch4["bytes"]),
            "chapter 4 approximations": lambda: cache_approximations.plot_approximations(ch4["table2"]),
            "chapter 4 blend": lambda: cache_approximations.plot_blend_sweep(ch4["table2"]),
            "chapter 4 frontier": lambda: frontier.plot_frontier(ch4["frontier"]),
            "chapter 4 retrieval": lambda: retrieval.plot_retrieval(ch4["retrieval"]),
            "chapter 4 needle": lambda: retrieval.plot_needle(ch4["retrieval"]),
            "chapter 4 follow-ups": lambda: followups.plot_followups(_with_followups(ch4["retrieval"])),
            "chapter 4 KL vs retrieval": lambda: retrieval.plot_kl_vs_retrieval(ch4["retrieval"],
                                                                                ch4["frontier"]),
            "chapter 5 losses": lambda: qwen3_switch.plot_losses(n["05"]),
            "chapter 5 quality vs cost": lambda: qwen3_switch.plot_quality_cost(n["05"]),
            "chapter 5 cost vs exactness": lambda: qwen3_switch.plot_cost_exactness(n["05"]),
            "chapter 5 patching map": lambda: qwen3_switch.plot_patch_map(n["05"]),
            "decision guide": lambda: conclusions.plot_decision_guide(conclusions.decision_rows(runs), model),
            "benchmark": lambda: appendix.plot_performance(bench)}


FIGURES = ["chapter 1", "chapter 2", "chapter 3 probe", "chapter 3 attention", "chapter 4 decode",
           "chapter 4 bytes", "chapter 4 approximations", "chapter 4 blend", "chapter 4 frontier",
           "chapter 4 retrieval", "chapter 4 needle", "chapter 4 follow-ups", "chapter 4 KL vs retrieval",
           "chapter 5 losses",
           "chapter 5 quality vs cost", "chapter 5 cost vs exactness", "chapter 5 patching map",
           "decision guide", "benchmark"]


@pytest.mark.parametrize("name", FIGURES)
def test_every_figure_reads_with_the_full_builds_results(plt, runs, name):
    """The four figures of the issue (chapter 4's KL vs retrieval, the guide, chapter 5's losses) and
    every other: no text over another, no legend over data, no text too small at the column's width."""
    fig = _book_figures(runs)[name]()
    assert figures.overlapping_text(fig) == [], name
    assert figures.covered_or_clipped(fig) == [], name
    assert figures.illegible_text(fig) == [], name
    plt.close(fig)


def test_every_figure_is_checked(runs):
    assert sorted(_book_figures(runs)) == sorted(FIGURES)


def test_the_frontier_chart_shows_no_toolbar_over_its_title(runs):
    from kvutils.report import frontier

    chart = frontier.frontier_chart(runs["04_cache_approximations"]["numbers"]["frontier"])
    spec = json.loads(chart.html.split("const spec = ")[1].split(";\n")[0])
    assert spec["config"]["displayModeBar"] is False
    assert 'role="img" aria-label="Interactive chart: ' in chart.html


def _figure_cells(notebook: Path) -> list[tuple[int, dict]]:
    """Every code cell whose last statement shows a figure: a figure variable, a `figures[...]`
    entry, a `*_chart(...)` or a `plot_*(...)` call."""
    cells = json.loads(notebook.read_text())["cells"]
    found = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        body = ast.parse("".join(cell["source"])).body
        last = ast.unparse(body[-1].value).split(" if ")[0] if body and isinstance(body[-1], ast.Expr) else ""
        if PLOT_NAMES.search(last):
            found.append((i, cell))
    return found


@pytest.mark.parametrize("notebook", sorted((ROOT / "notebooks").glob("*.ipynb")), ids=lambda p: p.stem)
def test_every_figure_has_an_alt_text_that_says_what_it_shows(notebook):
    """myst-nb sets the page's <img alt> from the cell's `mystnb: image: alt:` (before: the image's
    file path). Each says in a sentence or more what the figure shows, not where it is stored."""
    cells = json.loads(notebook.read_text())["cells"]
    shown = _figure_cells(notebook)
    with_alt = [i for i, c in enumerate(cells) if "mystnb" in c.get("metadata", {})]
    assert with_alt == [i for i, _ in shown], "alt text on a cell showing no figure, or a figure with none"
    alts = []
    for i, cell in shown:
        alt = cell["metadata"]["mystnb"]["image"]["alt"]
        assert len(alt.split()) >= 12, (i, alt)
        assert not re.search(r"\.(png|svg|jpe?g|html)\b|_images|\w+/\w+/", alt), (i, alt)  # not a path
        alts.append(alt)
    assert len(set(alts)) == len(alts)  # each its own


def test_the_figure_cells_are_found():
    """The finder itself: chapter 4 shows eight figures and the frontier chart; chapter 1 one."""
    assert len(_figure_cells(ROOT / "notebooks" / "04_cache_approximations.ipynb")) == 9
    assert len(_figure_cells(ROOT / "notebooks" / "01_cache_exactness.ipynb")) == 1


def test_myst_nb_puts_the_cells_alt_text_on_the_pages_image(tmp_path, plt):
    """The mechanism end to end: chapter 5's loss-curve cell, given a PNG output as papermill would
    leave it, rendered by myst-nb (as the book renders it): the <img> carries the cell's alt text."""
    import base64
    import io

    pytest.importorskip("myst_nb")
    from docutils.core import publish_string
    from myst_nb.docutils_ import Parser

    notebook = json.loads((ROOT / "notebooks" / "05_qwen3_switch.ipynb").read_text())
    (i, cell), = [(i, c) for i, c in _figure_cells(ROOT / "notebooks" / "05_qwen3_switch.ipynb")
                  if "loss_curves" in "".join(c["source"])]
    fig, _ = plt.subplots(figsize=(1, 1))
    png = io.BytesIO()
    fig.savefig(png, format="png")
    plt.close(fig)
    output = {"output_type": "display_data", "metadata": {}, "data": {
        "image/png": base64.b64encode(png.getvalue()).decode(), "text/plain": "<Figure size 100x100>"}}
    cell = {**cell, "execution_count": 1, "outputs": [output]}
    page = publish_string(json.dumps({**notebook, "cells": [cell]}), parser=Parser(), writer_name="html",
                          settings_overrides={"nb_execution_mode": "off", "output_encoding": "unicode",
                                              "report_level": 4, "nb_output_folder": str(tmp_path)})
    alts = [html.unescape(alt) for alt in re.findall(r'<img alt="([^"]*)"', page)]
    assert alts == [cell["metadata"]["mystnb"]["image"]["alt"]]
