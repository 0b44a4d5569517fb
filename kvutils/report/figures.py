"""The figure style every page draws with, and the checks that a figure reads at the text column's
width (no text too small once scaled, no overlapping tick labels)."""
from __future__ import annotations

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
