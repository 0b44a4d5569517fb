"""Chapter 4's frontier of the methods people deploy: mean KL against the bytes the cache holds on
average over the decode, as a table, a static chart (for the results folder), an interactive chart
(for the page), what each method always keeps, and kvpress's observations beside ours. The page's verdicts
against random eviction are `kvutils.report.chapter4_tables.frontier_verdict_table`'s."""
from __future__ import annotations

import pandas as pd

from kvutils.cache.registry import by_place, parse_op
from kvutils.core import compare
from kvutils.report import interactive
from kvutils.report.figures import styled
from kvutils.report.names import human, method_name
from kvutils.report.tables import PageTable, page_table, rows_table
from kvutils.report.text import fmt

EXACT_FLOOR = 1e-7  # where an exact row (KL 0) is drawn on the log axis
# a method without a colour of its own (its class's `colour` is None) gets one of these on a chart
SPARE_COLOURS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5")
HELD_SPREAD = 1.1  # within a level, mean held bytes further apart than this factor are reported as unequal
X_LABEL = "mean bytes held over the decode (% of the exact cache's)"


def label(spec: str) -> str:
    """A method's name for a reader, with its setting: 'SnapKV (evicts 50 %)', 'window of 576 (4 sinks)'."""
    return human(spec)


def method_named(name: str) -> str:
    """A method's name on the charts: its registry name, the window's "streaming window"."""
    return "streaming window" if name == "window" else name


def method(spec: str) -> str:
    """The method a spec belongs to (one colour on the chart)."""
    return method_named(parse_op(spec).name)


def colours() -> dict[str, str]:
    """One colour per method (its class's `colour`), told apart in print (the baseline grey, the exact
    cache black), keyed as `method` names it; a method without one is left to SPARE_COLOURS."""
    return {method_named(cls.name): cls.colour for cls in by_place() if cls.colour is not None}


def chart_colours(methods) -> dict[str, str]:
    """The colour of each method on one chart, in order: its own, else the next spare one, else grey."""
    spare, own = iter(SPARE_COLOURS), colours()
    return {m: own.get(m) or next(spare, "0.5") for m in dict.fromkeys(methods)}


def what_it_keeps(spec: str) -> str:
    """What the method always keeps, from its own parameters (its class's `always_keeps()`)."""
    return parse_op(spec).always_keeps()


def keeps_table(frontier: dict) -> pd.DataFrame:
    """Per method on the frontier, by the legend's name: what it always keeps."""
    rows = {}
    for run in frontier.values():
        for spec in run["ops"]:
            rows.setdefault(method_name(method(spec)), {"always keeps": what_it_keeps(spec)})
    return rows_table(rows, "method")


def _triple(r: dict) -> str:
    return f"{fmt(r['mean_kl'], 3)} · {r['top1_agreement_pct']:.1f} · {fmt(r['perplexity'], 4)}"


def _held_pct(run: dict, r: dict) -> float:
    return 100 * r["mean_held_bytes"] / run["exact_mean_held_bytes"]


def frontier_table(frontier: dict) -> pd.DataFrame:
    """Per method and model: mean KL · top-1 % · perplexity, and the mean bytes held over the
    decode as % of the exact cache's. Rows are keyed by the full spec; the page shows the short
    label with the spec as its tooltip."""
    rows: dict[str, dict[str, str]] = {}
    for model, run in frontier.items():
        for spec, r in run["ops"].items():
            row = rows.setdefault(spec, {})
            row[model] = _triple(r)
            row[f"{model}: held %"] = fmt(_held_pct(run, r), 3)
        for spec, why in run.get("refused", {}).items():
            rows.setdefault(spec, {})[model] = f"refused: {why}"
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = "method (KL nats · top-1 % · perplexity)"
    return page_table(table, short={spec: label(spec) for spec in rows})


def frontier_points(frontier: dict) -> pd.DataFrame:
    """One row per (model, method spec): method, mean held bytes over the decode (% of exact, MiB),
    mean KL (floored at EXACT_FLOOR for a log axis; the true value beside it), top-1, perplexity."""
    rows = []
    for model, run in frontier.items():
        n = len(run["documents"])
        for spec, r in run["ops"].items():
            rows.append({"model": model, "method": method(spec), "point": label(spec), "op spec": spec,
                         "family": r["family"], "held % of exact": round(_held_pct(run, r), 2),
                         "held MiB": round(r["mean_held_bytes"] / 2 ** 20, 4),
                         "mean KL (nats)": float(f"{r['mean_kl']:.4g}"), "plotted KL": max(r["mean_kl"],
                                                                                           EXACT_FLOOR),
                         "top-1 (%)": round(r["top1_agreement_pct"], 2),
                         "perplexity": float(f"{r['perplexity']:.5g}"),
                         "documents": n, "tokens": f"{run['prefill']}+{run['decode']}"})
    return pd.DataFrame(rows)


def _title(frontier: dict) -> str:
    docs = sorted({len(r["documents"]) for r in frontier.values()})
    tokens = sorted({f"{r['prefill']}+{r['decode']}" for r in frontier.values()})
    docs_text = "/".join(map(str, docs)) + (" doc" if docs == [1] else " docs")
    return f"Bytes vs fidelity: {', '.join(frontier)} ({docs_text}, {'/'.join(tokens)} tokens)"


def setup_table(frontier: dict) -> PageTable | None:
    """The frontier's setup per model: documents and lengths, the share of the prefill that SnapKV's
    observation window takes, and the fixed budgets matched to the presses' mean held entries."""
    rows = {}
    for model, run in frontier.items():
        windows = sorted({parse_op(s).window for s in run["ops"]
                          if method(s) in ("snapkv", "pyramidkv", "adakv")})
        rows[model] = {
            "documents": str(len(run["documents"])),
            "prefill + decode (tokens)": f"{run['prefill']} + {run['decode']}",
            "SnapKV's observation window": ", ".join(f"{w} tokens ({100 * w / run['prefill']:.1f} % of the "
                                                     "prefill)" for w in windows) or "—",
            "fixed budgets matched to the presses' held entries": "; ".join(
                f"{label(s)} at {r['level']:g}" for s, r in run["ops"].items()
                if r.get("level") is not None and parse_op(s).family != "press") or "—"}
    return rows_table(rows, "model") if rows else None


def same_lengths(frontier: dict, prefill: int, decode: int) -> dict:
    """The frontier runs scored at Table 2's lengths (only those may join Table 2 as rows)."""
    return {m: r for m, r in frontier.items() if (r["prefill"], r["decode"]) == (prefill, decode)}


def frontier_chart(frontier: dict):
    """The frontier as an interactive chart (kvutils.report.interactive): colour per method, symbol per
    model, every point's spec, KL, top-1 and bytes on hover. The legend has one entry per method
    (its colour) and one per model (its marker), not one per pair, so it fits the chart's height."""
    import plotly.express as px

    points = frontier_points(frontier)
    colour = chart_colours(points["method"])  # the static chart's colours, under the legend's names
    points["method"] = points["method"].map(method_name)
    figure = px.scatter(points, x="held % of exact", y="plotted KL", color="method", symbol="model",
                        log_y=True, color_discrete_map={method_name(m): "grey" if c == "0.5" else c
                                                         for m, c in colour.items()},
                        hover_data=["point", "op spec", "mean KL (nats)", "top-1 (%)", "held MiB",
                                    "perplexity"],
                        title=_title(frontier), height=600, template="plotly_white",
                        labels={"held % of exact": X_LABEL,
                                "plotted KL": f"mean KL vs exact (nats, log; {EXACT_FLOOR:g} = exact)"})
    figure.update_traces(marker={"size": 10, "line": {"width": 1, "color": "white"}})
    methods, symbols = set(), {}
    for trace in figure.data:  # px names a trace "method, model"
        method, model = trace.name.rsplit(", ", 1)
        symbols.setdefault(model, trace.marker.symbol)
        trace.update(name=method, legendgroup=method, showlegend=method not in methods)
        methods.add(method)
    for model, symbol in symbols.items():  # the markers' key: grey, no data
        figure.add_scatter(x=[None], y=[None], mode="markers", name=f"model: {model}", hoverinfo="skip",
                           marker={"symbol": symbol, "color": "grey", "size": 10})
    figure.update_layout(legend_title_text="method; model")
    return interactive.chart(figure, config={"displayModeBar": False})  # Plotly's toolbar covered the title


@styled
def plot_frontier(frontier: dict):
    """Mean KL (log) against mean bytes held over the decode, one panel per model (two models'
    methods overlaid in one colour each could not be told apart): one colour per method, the same
    on every panel, its budgets joined by a line. With no model, a figure that says the frontier was
    not run."""
    import matplotlib.pyplot as plt

    if not frontier:
        fig, ax = plt.subplots(figsize=(7.5, 6.4))
        ax.set_axis_off()
        ax.text(0.5, 0.5, "frontier not run (frontier_models is empty)", ha="center", va="center",
                fontsize=12)
        fig.suptitle("Bytes vs fidelity: no model")
        return fig
    points = frontier_points(frontier)
    methods = list(dict.fromkeys(points["method"]))
    colour = chart_colours(methods)
    fig, axes = plt.subplots(len(frontier), 1, figsize=(7.5, 3.6 * len(frontier) + 1.8), sharex=True,
                             squeeze=False)
    for ax, model in zip(axes[:, 0], frontier):
        for name, group in points[points["model"] == model].groupby("method", sort=False):
            group = group.sort_values("held % of exact")
            ax.plot(group["held % of exact"], group["plotted KL"], marker="o", color=colour[name], lw=1, ms=6,
                    mec="white", mew=0.6)
        ax.set_yscale("log")
        ax.set_title(model)
        ax.set_ylabel(f"mean KL vs exact\n(nats, log; {EXACT_FLOOR:g} = exact)")
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel(X_LABEL)
    handles = [plt.Line2D([], [], color=colour[m], marker="o", lw=1, label=method_name(m)) for m in methods]
    fig.suptitle(_title(frontier))
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3, frameon=False)
    return fig


# --------------------------------------------------------------------------- kvpress's observations beside
# ours


def _vs(run: dict, level: str, spec: str, other_method: str) -> list[compare.Paired]:
    """The level's paired results of `spec` against the method `other_method`, oriented spec − other."""
    out = []
    for v in run["verdicts"]:
        if str(v["level"]) != level or spec not in (v["a"], v["b"]):
            continue
        other = v["b"] if v["a"] == spec else v["a"]
        if method(other) != other_method:
            continue
        p = compare.Paired.from_dict(v)
        if p.a != spec:  # flip to spec − other
            flipped = {compare.A_LOWER: compare.A_HIGHER, compare.A_HIGHER: compare.A_LOWER}
            ci = (-p.ci95[1], -p.ci95[0]) if p.ci95 is not None else None
            p = compare.Paired(spec, other, p.n, -p.effect, ci, p.p, flipped.get(p.verdict, p.verdict),
                               p.unit)
        out.append(p)
    return out


def frontier_notes(frontier: dict) -> list[str]:
    """What the verdict table cannot show: a level whose methods hold unequal bytes, sliding-window
    layers that the prefill already overfills, and a method alike to no other by construction."""
    out = []
    for model, run in frontier.items():
        for level in run["levels"]:
            held = [_held_pct(run, r) for r in run["ops"].values() if str(r.get("level")) == level]
            if held and max(held) > HELD_SPREAD * min(held):
                out.append(f"{model} at compression {level}: the methods hold {min(held):.0f}% to "
                           f"{max(held):.0f}% of the exact cache's bytes on average, not the same: a lower "
                           "KL may come from holding more.")
        sliding = run.get("sliding")
        if sliding:
            out.append(f"{model}: {sliding['layers']} of its {sliding['of']} layers attend only to the last "
                       f"{sliding['window']} positions, which a {run['prefill']}-token prefill already "
                       "exceeds; on them a method's choice among older entries changes nothing.")
        out += [f"{model}: {label(t['a'])}: {t['why']}."
                for t in run.get("construction_ties", []) if t["b"] is None]
    return out


def _holding(run: dict, a: str, b: str) -> str:
    """The memory both sides of a comparison hold: '32.1 % against 80.8 %' of the exact cache."""
    return f"{fmt(_held_pct(run, run['ops'][a]), 3)} % against {fmt(_held_pct(run, run['ops'][b]), 3)} %"


KVPRESS = ("kvpress reports Expected Attention as the strongest press on Llama-3.1-8B (RULER, 4k context), "
           "and presses scoring below random or StreamingLLM on some models. Ours, from the verdicts above; "
           "in brackets, the share of the exact cache's bytes each side holds.")


def kvpress_table(frontier: dict) -> PageTable | None:
    """Our ranking beside kvpress's published observations (`KVPRESS`), per model and level: where
    Expected Attention stands, and each press that a paired test puts above random eviction or the
    matched streaming window."""
    rows = {}
    for model, run in frontier.items():
        for level, info in run["levels"].items():
            specs = [s for s, r in run["ops"].items() if str(r.get("level")) == level]
            mine = next((s for s in specs if method(s) == "expected_attention"), None)
            stands = "—"
            if mine is not None:
                lead = info["leaders"][0]
                stands = f"behind {label(lead)} ({_holding(run, mine, lead)})"
                if mine in info["leaders"]:
                    stands = "among the leaders (no detectable difference from the lowest mean)"
                if info["best"] == mine:
                    stands = "the single best"
            below = []
            for s in specs:
                if parse_op(s).family != "press" or method(s) == "random":
                    continue
                for other in ("random", "streaming window"):
                    worse = next((p for p in _vs(run, level, s, other) if p.better() == p.b), None)
                    if worse is not None:
                        below.append(f"{label(s)} vs {other} ({_holding(run, s, worse.b)})")
            rows[f"{model} at {level}"] = {"Expected Attention": stands,
                                           "presses worse than random or the window": "; ".join(below)
                                           or "none"}
    return rows_table(rows, "model at compression") if rows else None
