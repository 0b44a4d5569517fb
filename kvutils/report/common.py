"""Turning results into what the book shows: the article's figures beside ours, number formatting,
and the chapter-1 figure. Every number in the prose is formatted here from a results dict, never
typed by hand."""
from __future__ import annotations

import html
import re

import pandas as pd

from kvutils.core.article import article
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


def recompute_mode(decode: dict) -> str:
    """Which no-cache procedure a decode result comes from."""
    return "per step (article's procedure)" if decode["recompute"] == "per_step" else "one pass"


def recompute_label(decode: dict) -> str:
    """The procedure and the number of prompts it decoded."""
    n = decode["n_prompts"]
    return f"{recompute_mode(decode)}, {n} prompt{'s' * (n != 1)}"


def _decode_runs(by_dtype_result: dict) -> list[dict]:
    """A dtype's decode comparisons: the main run, then the per-step subset where there is one."""
    return [by_dtype_result[k] for k in ("decode", "decode_per_step") if k in by_dtype_result]


def chapter1_table(numbers: dict) -> PageTable:
    """Metric | article (Pythia) | this run (one column per model). Rows follow the article's E1/E2;
    every decoding row names its no-cache procedure: the article's numbers are all per step, so they
    sit beside our per-step rows only."""
    a = article()
    e1, e2 = a["e1_decode"], a["e2_prefix"]
    art_mode = "per step (article's procedure)"
    art_decode = {
        f"prompts decoded [{art_mode}]": str(e1["fp32"]["pythia-160m"]["n"]),
        f"fp32: identical sequences [{art_mode}]": ", ".join(
            f"{fraction(v['identical'], v['n'])} ({m})" for m, v in e1["fp32"].items()),
        f"fp32: max |logit diff| [{art_mode}]": ", ".join(
            f"{fmt(v['max_logit_diff'])} ({m})" for m, v in e1["fp32"].items()),
        f"fp64: identical sequences [{art_mode}]": fraction(e1["fp64"]["pythia-160m"]["identical"],
                                                            e1["fp64"]["pythia-160m"]["n"]),
        f"fp64: max |logit diff| [{art_mode}]": fmt(e1["fp64"]["pythia-160m"]["max_logit_diff"]),
        f"argmax agreement (%), every generated step [{art_mode}]": fmt(e1["argmax_agreement_pct"]),
    }
    art_rest = {
        "fp32: median logit std": ", ".join(f"{fmt(v['median_logit_std'])} ({m})" for m, v in e1["fp32"].items()),
        "fp32: prefixes with bit-identical K/V": fraction(e2["fp32"]["bit_identical"], e2["n_prefixes"]),
        "fp64: prefixes with bit-identical K/V": fraction(e2["fp64"]["bit_identical"], e2["n_prefixes"]),
        "fp64: residue across continuations": fmt(e2["fp64"]["residue"]),
        "fp32: max key diff, alone vs inside": fmt(e2["fp32"]["alone_vs_inside_max_key_diff"]),
        "fp64: max key diff, alone vs inside": fmt(e2["fp64"]["alone_vs_inside_max_key_diff"]),
    }
    rows: dict[str, dict[str, str]] = {}
    for model, by_dtype in numbers.items():
        column = f"this run: {model}"
        for dtype, r in by_dtype.items():
            p = "fp32" if dtype == "float32" else "fp64"
            for d in _decode_runs(r):
                mode = recompute_mode(d)
                rows.setdefault(f"prompts decoded [{mode}]", {})[column] = str(d["n_prompts"])
                for metric, value in (
                        (f"{p}: identical sequences [{mode}]", fraction(d["identical"], d["n_prompts"])),
                        (f"{p}: max |logit diff| [{mode}]", fmt(d["max_logit_diff"])),
                        (f"argmax agreement (%), steps before divergence [{mode}]", fmt(d["argmax_agreement_pct"])),
                        (f"argmax agreement (%), every generated step [{mode}]",
                         fmt(d["argmax_agreement_all_steps_pct"]))):
                    if metric.startswith("argmax"):  # over both dtypes: the lower one
                        value = min(rows.get(metric, {}).get(column, value), value, key=float)
                    rows.setdefault(metric, {})[column] = value
            x = r["prefixes"]
            for metric, value in ((f"{p}: median logit std", fmt(r["decode"]["median_logit_std"])),
                                  (f"{p}: prefixes with bit-identical K/V", fraction(x["bit_identical"], x["n_prefixes"])),
                                  (f"{p}: residue across continuations", fmt(x["max_diff_across_continuations"])),
                                  (f"{p}: max key diff, alone vs inside", fmt(x["max_key_diff_alone_vs_inside"]))):
                rows.setdefault(metric, {})[column] = value
    for metric, value in {**art_decode, **art_rest}.items():
        rows.setdefault(metric, {})["article (Pythia)"] = value
    table = pd.DataFrame.from_dict(rows, orient="index")
    table["article (Pythia)"] = table["article (Pythia)"].fillna("—")  # the article ran per step only
    table = table[["article (Pythia)"] + [c for c in table.columns if c != "article (Pythia)"]].fillna("not run")
    table.index.name = "metric"
    return page_table(table.sort_index(key=lambda idx: [_row_order(m) for m in idx]))


def _row_order(metric: str) -> tuple:
    """Decoding rows first (fp32, fp64, argmax), one-pass before per-step, then the prefix rows."""
    prefix_rows = ("prefixes with", "residue", "key diff", "median logit std")
    group = 1 if any(t in metric for t in prefix_rows) else 0
    return (group, not metric.startswith("prompts"), "argmax" in metric, metric.split(" [")[0], "per step" in metric)


@styled
def plot_chapter1(numbers: dict):
    """Top: per generated step, the largest |logit difference| between cached and no-cache decoding,
    one line per model, dtype and no-cache procedure (the legend names it). Bottom: per layer, max
    |Δkey| between a prefix computed alone and inside a longer sequence (depth normalised so models
    of different depth share an axis)."""
    import matplotlib.pyplot as plt

    floor = 1e-18  # an exactly equal value (0) has no place on a log axis: drawn at the floor
    fig, (ax_dec, ax) = plt.subplots(2, 1, figsize=(7.5, 8.5))
    for model, by_dtype in numbers.items():
        for dtype, r in by_dtype.items():
            for d in _decode_runs(r):
                steps = range(1, len(d["per_step_max_logit_diff"]) + 1)
                ax_dec.plot(list(steps), [max(v, floor) for v in d["per_step_max_logit_diff"]],
                            linestyle="-" if d["recompute"] == "one_pass" else ":",
                            marker="." if dtype == "float32" else "x", markersize=4,
                            label=f"{model}, {dtype}, {recompute_label(d)}")
            per_layer = r["prefixes"]["per_layer_max_key_diff_alone_vs_inside"]
            n = len(per_layer)
            ax.plot([(i + 1) / n for i in range(n)], [max(v, floor) for v in per_layer], marker="o",
                    markersize=3, linestyle="-" if dtype == "float32" else "--", label=f"{model}, {dtype}")
    for a in (ax_dec, ax):
        a.set_yscale("log")
        a.set_ylim(bottom=5e-19)
        a.axhline(floor, color="grey", linewidth=0.8, linestyle=":")
        a.text(0.01, 1.6e-18, "exactly equal (0)", fontsize=9, color="grey", transform=a.get_yaxis_transform())
    ax_dec.set_xlabel("generated step")
    ax_dec.set_ylabel("max |logit diff| (logit units, log)")
    ax_dec.set_title("Decoding: cache vs no cache, per step (up to the first divergence)")
    ax_dec.legend(loc="center right")
    ax.set_xlabel("layer depth (layer index / number of layers)")
    ax.set_ylabel("max |Δ key|, alone vs inside (log)")
    ax.set_title("Prefix keys alone vs inside a longer sequence, per layer")
    ax.legend()
    fig.suptitle(f"Chapter 1 — models: {', '.join(numbers)}")
    fig.tight_layout()
    return fig


def chapter1_glue(numbers: dict) -> dict[str, str]:
    """Short texts the chapter's prose glues in, each built from the results; a sentence that states
    a finding takes the form the numbers support."""
    out = {}
    for dtype, tag in (("float32", "fp32"), ("float64", "fp64")):
        decode, prefixes = [], []
        for model, by_dtype in numbers.items():
            if dtype not in by_dtype:
                continue
            d, x = by_dtype[dtype]["decode"], by_dtype[dtype]["prefixes"]
            decode.append(f"{fraction(d['identical'], d['n_prompts'])} identical sequences on {model} "
                          f"(max logit difference {fmt(d['max_logit_diff'])}; no-cache side: {recompute_label(d)})")
            prefixes.append(f"{fraction(x['bit_identical'], x['n_prefixes'])} bit-identical on {model} "
                            f"(largest difference {fmt(x['max_diff_across_continuations'])}; "
                            f"alone vs inside: {fmt(x['max_key_diff_alone_vs_inside'])})")
        out[f"{tag}_decode"] = "; ".join(decode) or f"not run ({dtype} not in dtypes)"
        out[f"{tag}_prefixes"] = "; ".join(prefixes) or f"not run ({dtype} not in dtypes)"
    runs = [r for m in numbers.values() for r in m.values()]
    any_decode = runs[0]["decode"]
    out["setup"] = (f"{any_decode['n_prompts']} prompts of {any_decode['prompt_tokens']} tokens, "
                    f"{any_decode['new_tokens']} greedy tokens each")
    out["mode"] = recompute_label(any_decode)
    out["models"] = ", ".join(numbers)
    out["weights"] = weights_note(numbers)
    decodes = [d for r in runs for d in _decode_runs(r)]
    ours = min(d["argmax_agreement_pct"] for d in decodes)
    every = min(d["argmax_agreement_all_steps_pct"] for d in decodes)
    out["argmax_agreement"] = fmt(ours)
    out["argmax_article"] = (
        "the same count holds over every generated step, as the article counts it" if every == ours else
        f"counted as the article does, over every generated step whatever each side had read by then, "
        f"it was {fmt(every)}%")
    diverged = [f"{d['n_prompts'] - d['identical']} of {d['n_prompts']} ({m}, {dtype})"
                for m, by in numbers.items() for dtype, r in by.items() for d in [r["decode"]]
                if d["identical"] < d["n_prompts"]]
    out["divergence"] = ("No sequence diverged in this run" if not diverged else
                         "Sequences diverged in this run: " + ", ".join(diverged))
    out["per_step"] = _per_step_glue(numbers)
    out["per_step_cost"] = _per_step_cost(numbers)
    out["fp64_shrink"] = _fp64_shrink(numbers)
    return out


def _per_step_glue(numbers: dict) -> str:
    """The article's per-step procedure on the first prompts beside one pass on the same prompts."""
    parts = []
    for model, by_dtype in numbers.items():
        for dtype, r in by_dtype.items():
            if "decode_per_step" not in r:
                continue
            ps, main = r["decode_per_step"], r["decode"]
            k = ps["n_prompts"]
            same = ps["first_divergence"] == main["first_divergence"][:k]
            parts.append(f"{model}, {dtype}: {fraction(ps['identical'], k)} identical (max logit difference "
                         f"{fmt(ps['max_logit_diff'])}); "
                         + ("the same sequences as one pass on those prompts" if same else
                            "different divergences from one pass on those prompts"))
    if not parts:
        modes = {r["decode"]["recompute"] for m in numbers.values() for r in m.values()}
        return ("Every prompt of this run was decoded with the article's per-step procedure" if modes == {"per_step"}
                else "This run did not repeat any prompt with the article's per-step procedure (per_step_prompts = 0)")
    k = next(r["decode_per_step"]["n_prompts"] for m in numbers.values() for r in m.values() if "decode_per_step" in r)
    return f"On the first {k} prompts, the article's per-step procedure gave " + "; ".join(parts)


def _per_step_cost(numbers: dict) -> str:
    ratios = [r["decode_per_step"]["seconds_per_prompt"] / r["decode"]["seconds_per_prompt"]
              for m in numbers.values() for r in m.values() if "decode_per_step" in r]
    if not ratios:
        return "this run did not time the two procedures side by side"
    span = fmt(min(ratios), 2) if len(ratios) == 1 else f"{fmt(min(ratios), 2)}–{fmt(max(ratios), 2)}"
    return (f"in this run it took {span} times as long per prompt as the one-pass comparison (one timing of each "
            f"procedure per model and precision, {len(ratios)} in all; the range is over them, not over repeats)")


def _fp64_shrink(numbers: dict) -> str:
    """How the alone-vs-inside key residue changed from fp32 to fp64, per model, as measured."""
    import math

    parts = []
    for model, by_dtype in numbers.items():
        if not {"float32", "float64"} <= set(by_dtype):
            continue
        a = by_dtype["float32"]["prefixes"]["max_key_diff_alone_vs_inside"]
        b = by_dtype["float64"]["prefixes"]["max_key_diff_alone_vs_inside"]
        zeros = sum(i["max_key_diff_alone_vs_inside"] == 0 for i in by_dtype["float32"]["prefixes"]["items"])
        n = len(by_dtype["float32"]["prefixes"]["items"])
        if a > 0 and b < a:
            change = (f"fell from {fmt(a, 3)} in fp32 to {fmt(b, 3)} in fp64" + (
                f", {fmt(math.log10(a / b), 2)} orders of magnitude" if b > 0 else ", to exactly 0"))
        elif a == 0:
            change = "was exactly 0 already in fp32"
        else:
            change = f"did not shrink: {fmt(a, 3)} in fp32, {fmt(b, 3)} in fp64"
        parts.append(f"{model}: the largest key difference alone vs inside {change}; in fp32 it was exactly 0 "
                     f"for {zeros} of {n} prefixes")
    return "; ".join(parts) or "This run did not compute both precisions, so it cannot show the change"
