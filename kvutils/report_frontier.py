"""Chapter 4's frontier of the methods people deploy: mean KL against the bytes the cache holds,
as a table, a static chart (for the results folder), an interactive chart (for the page) and the
glued headline of which method wins at each budget."""
from __future__ import annotations

import pandas as pd

from .report import fmt, styled


def _triple(r: dict) -> str:
    return f"{fmt(r['mean_kl'], 3)} · {r['top1_agreement_pct']:.2f} · {fmt(r['perplexity'], 4)}"


EXACT_FLOOR = 1e-7  # where an exact row (KL 0) is drawn on the log axis
EVICTION_FAMILIES = ("press", "decode-time eviction")
ATTENTION_INFORMED = ("snapkv", "expected_attention", "pyramidkv", "adakv", "h2o", "tova")


def _ratio(spec: str) -> float | None:
    return float(spec.split("compression_ratio=")[1].split(",")[0]) if "compression_ratio=" in spec else None


def frontier_table(frontier: dict) -> pd.DataFrame:
    """Per method and model: mean KL · top-1 % · perplexity, and the cache held as % of the exact one."""
    rows: dict[str, dict[str, str]] = {}
    for model, run in frontier.items():
        exact = run["exact_cache_bytes"]
        for spec, r in run["ops"].items():
            row = rows.setdefault(spec, {"family": r["family"]})
            row[model] = _triple(r)
            row[f"{model}: cache % of exact"] = fmt(100 * r["cache_bytes"] / exact, 3)
        for spec, why in run.get("refused", {}).items():
            rows.setdefault(spec, {"family": "transformers QuantizedCache"})[model] = f"refused: {why}"
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = "method (KL nats · top-1 % · perplexity)"
    return table


def frontier_points(frontier: dict) -> pd.DataFrame:
    """One row per (model, method): its spec, family, cache held (% of the exact cache and MiB),
    mean KL (floored at EXACT_FLOOR for a log axis; the true value beside it), top-1 and perplexity."""
    rows = []
    for model, run in frontier.items():
        exact = run["exact_cache_bytes"]
        n = len(run["documents"])
        for spec, r in run["ops"].items():
            rows.append({"model": model, "method": r["name"], "op spec": spec, "family": r["family"],
                         "cache % of exact": round(100 * r["cache_bytes"] / exact, 2),
                         "cache MiB": round(r["cache_bytes"] / 2 ** 20, 4),
                         "mean KL (nats)": float(f"{r['mean_kl']:.4g}"), "plotted KL": max(r["mean_kl"], EXACT_FLOOR),
                         "top-1 (%)": round(r["top1_agreement_pct"], 2), "perplexity": float(f"{r['perplexity']:.5g}"),
                         "documents": n, "tokens": f"{run['prefill']}+{run['decode']}"})
    return pd.DataFrame(rows)


def frontier_chart(frontier: dict):
    """The frontier as an interactive chart for the page (kvutils.interactive): every point's op
    spec, KL, top-1 and bytes on hover; one colour per family, one symbol per model."""
    from . import interactive

    points = frontier_points(frontier)
    docs = sorted(set(points["documents"]))
    return interactive.scatter(
        points, x="cache % of exact", y="plotted KL", color="family", symbol="model",
        hover=["op spec", "mean KL (nats)", "top-1 (%)", "cache MiB", "cache % of exact", "perplexity"], log_y=True,
        title=f"Bytes against fidelity — models: {', '.join(frontier)}; {'/'.join(map(str, docs))} documents each",
        x_label="cache held after the prefill (% of the exact cache's bytes)",
        y_label=f"mean KL from the exact cache (nats, log; {EXACT_FLOOR:g} = exact)", height=560)


@styled
def plot_frontier(frontier: dict):
    """Mean KL (log) against the bytes the cache holds, one panel per model (stacked, so that the
    text reads at the page's width), families coloured, each press and decode-time policy a line
    through its budgets."""
    import matplotlib.pyplot as plt

    models = list(frontier)
    n = max(len(models), 1)
    fig, axes = plt.subplots(n, 1, figsize=(7.5, 4.4 * n + 0.8), squeeze=False)
    colours = {}
    for ax, model in zip(axes[:, 0], models):
        run = frontier[model]
        exact = run["exact_cache_bytes"]
        by_name: dict[str, list] = {}
        for spec, r in run["ops"].items():
            by_name.setdefault(r["name"], []).append((r["cache_bytes"] / exact * 100, max(r["mean_kl"], EXACT_FLOOR),
                                                      r["family"], spec))
        for name, points in by_name.items():
            family = points[0][2]
            colour = colours.setdefault(family, f"C{len(colours)}")
            points.sort()
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            marker = "o" if family == "press" else ("s" if family == "decode-time eviction" else "D")
            ax.plot(xs, ys, marker=marker, color=colour, lw=1, ms=5, label=None)
            spec = points[0][3]
            single = name + (f" {spec.split(':')[1].split(',')[0].split('=')[1]}" if ":" in spec else "")
            ax.annotate(name if len(points) > 1 else single, (xs[-1], ys[-1]), fontsize=8.5, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_yscale("log")
        ax.set_xlabel("cache held after the prefill (% of the exact cache's bytes)")
        ax.set_ylabel(f"mean KL (nats, log;\n{EXACT_FLOOR:g} = exact)")
        docs = len(run["documents"])
        ax.set_title(f"{model}: {docs} document{'s' * (docs != 1)}, {run['prefill']}+{run['decode']} tokens")
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker="o", lw=1, label=f) for f, c in colours.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 3), frameon=False)
    fig.suptitle(f"Bytes against fidelity, every cache method — models: {', '.join(models)}")
    fig.tight_layout(rect=(0, 0.07 if len(handles) > 3 else 0.04, 1, 1))
    return fig


def frontier_winners(frontier: dict) -> dict[str, dict]:
    """Per model: at each compression ratio the eviction methods (press or decode-time policy) with
    the lowest mean KL (several where they tie exactly), and which attention-informed methods beat `random` at each ratio."""
    out = {}
    for model, run in frontier.items():
        per_ratio: dict[float, list] = {}
        for spec, r in run["ops"].items():
            ratio = _ratio(spec)
            if ratio is not None and r["family"] in EVICTION_FAMILIES:
                per_ratio.setdefault(ratio, []).append((r["mean_kl"], r["name"], r["top1_agreement_pct"]))
        winners = {}
        for ratio, entries in sorted(per_ratio.items()):
            kl, _, top1 = min(entries)
            tied = sorted(n for k, n, _ in entries if k == kl)  # e.g. adakv == snapkv where the budgets coincide
            random_kl = next((k for k, n, _ in entries if n == "random"), None)
            beat = sorted(n for k, n, _ in entries if n in ATTENTION_INFORMED and random_kl is not None and k < random_kl)
            lost = sorted(n for k, n, _ in entries if n in ATTENTION_INFORMED and random_kl is not None and k >= random_kl)
            winners[ratio] = {"best": tied, "kl": kl, "top1": top1, "random_kl": random_kl, "beat_random": beat,
                              "not_beating_random": lost}
        out[model] = winners
    return out


def frontier_glue(frontier: dict) -> str:
    """The frontier's headline, computed: per model and budget the best eviction method, and the
    attention-informed methods that do not beat random."""
    if not frontier:
        return "not run"
    parts = []
    for model, winners in frontier_winners(frontier).items():
        bits = []
        for ratio, w in winners.items():
            names = [f"**{n}**" for n in w["best"]]
            best = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1] + ", tied"
            each = " each" if len(names) > 1 else ""
            text = f"at compression {fmt(ratio)} {best} (mean KL {fmt(w['kl'], 3)}{each}, top-1 {w['top1']:.1f}%)"
            if w["not_beating_random"]:
                text += f"; not better than random: {', '.join(w['not_beating_random'])}"
            elif w["random_kl"] is not None:
                text += "; every attention-informed method beats random"
            bits.append(text)
        parts.append(f"{model}: " + "; ".join(bits) if bits else f"{model}: no eviction method in the run")
    return ". ".join(parts) + "."
