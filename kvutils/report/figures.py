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


def placeholder(title: str, message: str):
    """A figure that says, under its title, why there is nothing to draw (a study not run)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 2))
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center")
    fig.suptitle(title)
    return fig


def log_x_ticks(ax) -> None:
    """A log x axis labelled in plain numbers at 1, 2 and 5 of each decade (1 alone past two
    decades), with no minor-tick labels: matplotlib labels its minor ticks over one another when the
    axis spans under two decades. Call it once the data is drawn."""
    import math

    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_xscale("log")
    low, high = sorted(ax.get_xlim())
    decades = math.log10(high / low) if low > 0 else 3.0
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,) if decades > 2 else (1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


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


def _ticks_shown(axis) -> list:
    """The tick labels of one axis that the page shows: visible, non-empty, inside the view."""
    low, high = sorted(axis.get_view_interval())
    ticks = axis.get_major_ticks() + axis.get_minor_ticks()
    return [t.label1 for t in ticks if low <= t.get_loc() <= high and t.label1.get_visible()
            and t.label1.get_text().strip()]


def text_boxes(fig) -> list[tuple[str, str, object]]:
    """Every title, axis label and tick label of the figure as drawn: (what it is, its text, its
    window extent), the figure's suptitle and texts first, then each axes' titles, axis labels and
    tick labels. Texts inside an axes (value labels, annotations) are `covered_or_clipped`'s."""
    fig.canvas.draw()  # tick labels get their text when drawn
    renderer = fig.canvas.get_renderer()
    found = [("suptitle", fig._suptitle)] if getattr(fig, "_suptitle", None) is not None else []
    found += [("figure text", t) for t in fig.texts if t is not getattr(fig, "_suptitle", None)]
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        found += [(f"axes {i} title", t) for t in (ax.title, ax._left_title, ax._right_title)]
        found += [(f"axes {i} x label", ax.xaxis.label), (f"axes {i} y label", ax.yaxis.label)]
        found += [(f"axes {i} {name} tick", t) for name, axis in (("x", ax.xaxis), ("y", ax.yaxis))
                  for t in _ticks_shown(axis)]
    return [(kind, t.get_text(), t.get_window_extent(renderer)) for kind, t in found
            if t.get_visible() and t.get_text().strip()]


def overlapping_text(fig) -> list[str]:
    """Every pair of texts of the figure that overlap as drawn: tick labels on one axis (e.g. the
    minor-tick labels matplotlib adds to a log axis spanning less than two decades), a title over
    its neighbour's, a tick label over an axis label or title, the suptitle over an axes' title;
    empty when none do."""
    boxes = text_boxes(fig)
    problems = [f"{kind_a} {text_a[:40]!r} overlaps {kind_b} {text_b[:40]!r}"
                for i, (kind_a, text_a, box_a) in enumerate(boxes)
                for kind_b, text_b, box_b in boxes[i + 1:] if box_a.overlaps(box_b)]
    renderer = fig.canvas.get_renderer()
    areas = [(i, ax.get_window_extent(renderer)) for i, ax in enumerate(fig.axes)
             if ax.get_visible() and ax.axison]
    titles = [(kind, text, box) for kind, text, box in boxes if "title" in kind or kind == "figure text"]
    return problems + [f"{kind} {text[:40]!r} is drawn over the plot of axes {i}"
                       for kind, text, box in titles for i, area in areas if box.overlaps(area)]


def covered_or_clipped(fig) -> list[str]:
    """What a reader could not see whole: a legend drawn over an axes' data (its bars, points, the
    points of its curves or its value labels), and a value label that reaches past the edge of its
    axes (where the page cuts it or the title runs into it); empty when nothing is hidden."""
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
        points += [line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
                   for line in ax.lines  # a curve's points (a loss curve's spike)
                   if line.get_visible() and len(line.get_xydata())]
        for _, box in legends:  # any legend, its own axes' or another's, over this axes' data
            for name, where in data:  # what is drawn of it: a bar clipped to its axes (a log axis has no 0)
                seen = Bbox.intersection(where, frame)
                if seen is not None and seen.width > 0 and seen.height > 0 and box.overlaps(seen):
                    problems.append(f"the legend covers {name} of {ax.get_title()[:30]!r}")
            for xy in points:
                inside = ((xy[:, 0] > box.x0) & (xy[:, 0] < box.x1) & (xy[:, 1] > box.y0) & (xy[:,
                                                                                                1] < box.y1))
                if inside.any():
                    problems.append(f"the legend covers {int(inside.sum())} plotted point(s) of "
                                    f"{ax.get_title()[:30]!r}")
        for t in ax.texts:
            if not t.get_visible() or not t.get_text().strip():
                continue
            where = t.get_window_extent(renderer)
            if (where.x0 < frame.x0 - 1 or where.x1 > frame.x1 + 1
                    or where.y0 < frame.y0 - 1 or where.y1 > frame.y1 + 1):
                problems.append(f"the label {t.get_text()[:30]!r} reaches past its axes "
                                f"({ax.get_title()[:30]!r})")
    return problems
