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


def covered_or_clipped(fig) -> list[str]:
    """What a reader could not see whole: a legend drawn over an axes' data (its bars, points or
    value labels), and a value label that reaches past the edge of its axes (where the page cuts it
    or the title runs into it); empty when nothing is hidden."""
    import numpy as np
    from matplotlib.collections import PathCollection
    from matplotlib.patches import Rectangle
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    legends = [(leg, leg.get_window_extent(renderer)) for leg in fig.legends]
    for ax in fig.axes:
        if ax.get_legend() is not None:
            legends.append((ax.get_legend(), ax.get_legend().get_window_extent(renderer)))
    for ax in fig.axes:
        frame = ax.get_window_extent(renderer)
        data = [(f"bar {i}", p.get_window_extent(renderer)) for i, p in enumerate(ax.patches)
                if isinstance(p, Rectangle) and p.get_visible() and p.get_width() and p.get_height()]
        data += [(f"label {t.get_text()!r}", t.get_window_extent(renderer)) for t in ax.texts
                 if t.get_visible() and t.get_text().strip()]
        points = [ax.transData.transform(np.asarray(c.get_offsets())) for c in ax.collections
                  if isinstance(c, PathCollection) and c.get_visible() and len(c.get_offsets())]
        for _, box in legends:  # any legend, its own axes' or another's, over this axes' data
            for name, where in data:  # what is drawn of it: a bar clipped to its axes (a log axis has no 0)
                seen = Bbox.intersection(where, frame)
                if seen is not None and seen.width > 0 and seen.height > 0 and box.overlaps(seen):
                    problems.append(f"the legend covers {name} of {ax.get_title()[:30]!r}")
            for xy in points:
                inside = ((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:, 1] < box.y1))
                if inside.any():
                    problems.append(f"the legend covers {int(inside.sum())} plotted point(s) of {ax.get_title()[:30]!r}")
        for t in ax.texts:
            if not t.get_visible() or not t.get_text().strip():
                continue
            where = t.get_window_extent(renderer)
            if where.x0 < frame.x0 - 1 or where.x1 > frame.x1 + 1 or where.y0 < frame.y0 - 1 or where.y1 > frame.y1 + 1:
                problems.append(f"the label {t.get_text()[:30]!r} reaches past its axes ({ax.get_title()[:30]!r})")
    return problems
