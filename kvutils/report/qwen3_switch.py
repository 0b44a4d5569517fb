"""What chapter 5 shows: loss curves, accuracy against k, the cost and exactness of each switch
policy, the patching map and the tables, all built from the results dict of
`kvutils.studies.qwen3_switch.study.run` (its Evidence blocks: `kvutils.report.switch_evidence`)."""
from __future__ import annotations

import pandas as pd

from kvutils.core.article import article
from kvutils.lora.switching import POLICY_TEXT
from kvutils.report import interactive
from kvutils.report.figures import styled
from kvutils.report.tables import page_table
from kvutils.report.text import fmt

POLICY_STYLE = {"recompute": ("tab:blue", "o"), "stale": ("tab:red", "X"),
                "tail_patch": ("tab:green", "s"), "activated": ("tab:purple", "D")}


def _k_label(k: int, n_layers: int) -> str:
    return f"k = {k} (L)" if k == n_layers else f"k = {k}"


def adapter_label(r: dict, name: str) -> str:
    """An adapter as the figures and texts name it: its kind and depth k."""
    a = r["training"]["adapters"][name]
    kind = "activated LoRA" if a["activated"] else "LoRA tail"
    return f"{kind}, {_k_label(a['k'], r['layers'])}"


def _title_model(model: str, r: dict) -> str:
    return f"{model} ({r['model_type']}, {r['layers']} layers)"


# --------------------------------------------------------------------------- figures


@styled
def plot_losses(numbers: dict):
    """Training loss per step of every adapter, one panel per model."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(numbers), 1, figsize=(7.4, 5.4 * len(numbers)), squeeze=False)
    for ax, (model, r) in zip(axes[:, 0], numbers.items()):
        for name, a in r["training"]["adapters"].items():
            ax.plot(range(1, len(a["losses"]) + 1), a["losses"],
                    marker="." if len(a["losses"]) < 40 else None,
                    linestyle="--" if a["activated"] else "-", label=adapter_label(r, name))
        ax.set_xlabel("training step")
        ax.set_ylabel("cross-entropy of the label token (nats)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))  # below the axes: no curve hidden
        ax.set_title(f"Training loss\n{_title_model(model, r)}")
    fig.tight_layout()
    return fig


POLICY_LABEL = {"tail_patch": "LoRA tail, tail patch (exact)",
                "stale": "LoRA tail, stale reuse of the base cache",
                "activated": "activated LoRA of the same k, base cache reused"}


def curve_table(numbers: dict) -> pd.DataFrame:
    """Every model's curve rows in one tidy DataFrame (a `model` column first)."""
    return pd.DataFrame([{"model": model, **row} for model, r in numbers.items() for row in r["curve"]])


def quality_cost_chart(numbers: dict):
    """The quality-vs-cost curve as an interactive chart for the page (kvutils.report.interactive): every
    adapter and policy a point at its switch time (share of a full recompute) and held-out accuracy,
    with k, the 95 % interval, n, the FLOPs share and the extra memory on hover."""
    table = curve_table(numbers).assign(
        **{"switch time (% of recompute)": lambda t: 100 * t.switch_time_fraction,
           "switch FLOPs (% of recompute)": lambda t: 100 * t.switch_flops_fraction,
           "95% interval": lambda t: [f"{fmt(lo, 3)}–{fmt(hi, 3)}" for lo, hi in zip(t.ci95_low_pct,
                                                                                     t.ci95_high_pct)],
           "policy": lambda t: t.policy.map(POLICY_LABEL)})
    return interactive.scatter(
        table, x="switch time (% of recompute)", y="accuracy_pct", color="policy", symbol="model",
        hover=["k", "accuracy_pct", "95% interval", "n", "auc", "switch FLOPs (% of recompute)",
               "extra_bytes_per_token"],
        title=f"Held-out accuracy against the cost of the switch — models: {', '.join(numbers)}",
        x_label="time of the switch (% of a full recompute under the adapter)",
        y_label="held-out accuracy (%)")


@styled
def plot_quality_cost(numbers: dict):
    """Per model: held-out accuracy (95 % intervals as bars) against k, for the tail with the tail
    patch, the same tail with stale reuse and the activated adapter of the same k, with the base
    model's zero-shot accuracy and chance; the top axis gives the tail patch's switch cost at each k
    (time as a share of a full recompute). Stale reuse and the activated adapter cost nothing."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    fig, axes = plt.subplots(len(numbers), 1, figsize=(7.4, 6.4 * len(numbers)), squeeze=False)
    for ax, (model, r) in zip(axes[:, 0], numbers.items()):
        table = pd.DataFrame(r["curve"])
        ks = r["k_values"]
        for i, policy in enumerate(("tail_patch", "stale", "activated")):
            colour, marker = POLICY_STYLE[policy]
            part = table[table.policy == policy]
            shift = [k * 2 ** (0.06 * (i - 1)) for k in part.k]  # side by side, so the bars stay apart
            ax.errorbar(shift, part.accuracy_pct, yerr=[part.accuracy_pct - part.ci95_low_pct,
                                                        part.ci95_high_pct - part.accuracy_pct],
                        color=colour, marker=marker, capsize=3, label=POLICY_LABEL[policy])
        zero = r["training"]["zero_shot"]["heldout"]
        ax.axhline(zero["accuracy_pct"], color="black", linestyle=":",
                   label=f"base model zero-shot ({fmt(zero['accuracy_pct'], 3)}%)")
        ax.axhline(50, color="grey", linewidth=1, label="chance (50%)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off()
        ax.set_ylim(0, 105)
        ax.set_xlabel(f"k: adapted layers at the top of the model (of L = {r['layers']})")
        ax.set_ylabel(f"held-out accuracy (%), n = {zero['n']}, 95% interval")
        top = ax.secondary_xaxis("top")
        top.set_xticks(ks, [f"{100 * r['cost']['per_k'][str(k)]['tail_time_fraction']:.0f}%" for k in ks])
        top.xaxis.set_minor_locator(NullLocator())  # the log axis would add its own labels between the k
        top.set_xlabel("tail patch: switch time, % of a full recompute")
        ax.grid(alpha=0.3)
        # below: no point hidden
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
        ax.set_title(f"Held-out accuracy against switch cost\n{_title_model(model, r)}")
    fig.tight_layout()
    return fig


def _floor(values: list[float], floor: float) -> list[float]:
    return [max(v, floor) for v in values]


@styled
def plot_cost_exactness(numbers: dict):
    """The chapter's main figure, per model: (left) each policy's switch time against its largest
    logit error vs the reference — exact results sit on the floor line; (right) the tail patch's
    time and FLOPs as a fraction of a full recompute, against k/L."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2 * len(numbers), 1, figsize=(7.4, 2 * 5.4 * len(numbers)), squeeze=False,
                             height_ratios=[1.35, 1] * len(numbers))  # the upper panel carries its legend
    floor = 1e-9
    for (ax, ax_frac), (model, r) in zip(axes[:, 0].reshape(-1, 2), numbers.items()):
        cost, scores = r["cost"], r["switch"]["scores"]
        for policy in ("recompute", "stale", "tail_patch"):
            colour, marker = POLICY_STYLE[policy]
            xs = [1000 * cost["per_k"][str(k)][policy]["seconds"] for k in r["k_values"]]
            ys = [scores[f"tail{k}"][policy]["max_abs_logit_diff"] for k in r["k_values"]]
            label = POLICY_TEXT[policy] + (", every k" if policy == "recompute" else "")
            ax.scatter(xs, _floor(ys, floor), color=colour, marker=marker, s=55, label=label, alpha=0.85)
            if policy == "recompute":
                continue
            for i, (x, y, k) in enumerate(zip(xs, ys, r["k_values"])):
                offset = (6, 3 - 9 * (i % 2)) if policy == "stale" else (0, -12 - 9 * (i % 2))
                ax.annotate(f"k={k}", (x, max(y, floor)), textcoords="offset points", xytext=offset,
                            fontsize=8,
                            ha="left" if policy == "stale" else "center", color=colour)
        colour, marker = POLICY_STYLE["activated"]
        act = max(scores[f"activated{k}"]["activated"]["max_abs_logit_diff"] for k in r["k_values"])
        ax.scatter([1000 * cost["activated"]["seconds"]], [max(act, floor)], color=colour, marker=marker,
                   s=55,
                   label=POLICY_TEXT["activated"] + ", every k, against one pass")
        ax.axhline(floor, color="grey", linestyle=":", linewidth=1)
        ax.annotate("exact: 0 is drawn at 1e-9", (0.01, floor), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 4), fontsize=8, color="grey")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(floor / 30, None)
        ax.set_xlabel(f"time to build the adapter's cache\nfor {cost['prefix_tokens']} prefix tokens (ms, "
                      "log scale)")
        ax.set_ylabel("max |logit difference| vs reference")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, frameon=False)
        ax.set_title(f"Cost vs exactness of each switch\n{_title_model(model, r)}")
        ks = r["k_values"]
        frac_k = [k / r["layers"] for k in ks]
        ax_frac.plot([0, 1], [0, 1], color="grey", linestyle=":", label="k / L")
        ax_frac.plot(frac_k, [cost["per_k"][str(k)]["tail_time_fraction"] for k in ks], marker="s",
                     color="tab:green", label="tail patch: measured time / full recompute")
        ax_frac.plot(frac_k, [cost["per_k"][str(k)]["tail_flops_fraction"] for k in ks], marker="^",
                     color="tab:olive", linestyle="--", label="tail patch: FLOPs / full recompute")
        ax_frac.set_xlim(0, 1.05)
        ax_frac.set_ylim(0, max(1.15, 1.08 * max(cost["per_k"][str(k)]["tail_time_fraction"] for k in ks)))
        ax_frac.set_xlabel("k / L (share of layers adapted)")
        ax_frac.set_ylabel("switch cost ÷ full recompute")
        ax_frac.grid(alpha=0.3)
        # below: no point hidden
        ax_frac.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=1, fontsize=8)
        ax_frac.set_title(f"Tail patch cost against k/L\n{_title_model(model, r)}")
    fig.tight_layout()
    return fig


@styled
def plot_patch_map(numbers: dict):
    """Per model: answer flips (%) and mean change of the answer's log-odds when one position's
    cached K/V in one group of layers come from the opposite-sense context."""
    import matplotlib.pyplot as plt
    import numpy as np

    rows = max(len(r["patching"]["row_labels"]) for r in numbers.values())
    fig, axes = plt.subplots(2 * len(numbers), 1, figsize=(7.4, 2 * len(numbers) * (0.36 * rows + 2.4)),
                             squeeze=False)
    for (ax_flip, ax_delta), (model, r) in zip(axes[:, 0].reshape(-1, 2), numbers.items()):
        pm = r["patching"]
        flips = np.array(pm["flip_pct"], dtype=float)
        delta = np.array(pm["delta_logodds_mean"], dtype=float)
        bound = np.nanmax(np.abs(delta)) or 1.0
        for ax, values, cmap, vmin, vmax, unit in (
                (ax_flip, flips, "viridis", 0, 100,
                 f"right answers flipped (% of n = {pm['n_clean_right']})"),
                (ax_delta, delta, "RdBu", -bound, bound,
                 "mean change of log-odds (own − other label, nats)")):
            image = ax.imshow(values, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax)
            fig.colorbar(image, ax=ax, label=unit, fraction=0.05)
            ax.set_xticks(range(len(pm["col_labels"])), pm["col_labels"], rotation=45)
            ax.set_yticks(range(len(pm["row_labels"])), pm["row_labels"])
            ax.axhline(pm["control_rows"] - 0.5, color="white", linewidth=2)
            ax.axhline(len(pm["row_labels"]) - 1.5, color="white", linewidth=2)
            ax.axvline(len(pm["col_labels"]) - 1.5, color="white", linewidth=2)
            ax.set_xlabel("layers whose cached K/V are copied (1-based)")
            ax.set_ylabel("position copied (prefix rows = control)")
        ax_flip.set_title(f"Answer flips — {_title_model(model, r)}\n{adapter_label(r, pm['adapter'])}; n = "
                          f"{pm['n_clean_right']} pairs the clean adapter answers right")
        ax_delta.set_title(f"Log-odds change — {_title_model(model, r)}\nmean over all {pm['n_contexts']} "
                           "pairs")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- table and glue


def switch_table(numbers: dict) -> pd.DataFrame:
    """Per model, k and policy: held-out accuracy, the gap to the reference, cost and extra memory."""
    rows = []
    for model, r in numbers.items():
        scores, cost, held = r["switch"]["scores"], r["cost"], r["switch"]["heldout"]
        for k in r["k_values"]:
            for policy in ("recompute", "tail_patch", "stale"):
                accuracy = held[f"tail{k}"].get("tail_patch" if policy == "recompute" else policy)
                rows.append(_row(model, _k_label(k, r["layers"]), policy, scores[f"tail{k}"][policy],
                                 cost["per_k"][str(k)][policy], accuracy))
            rows.append(_row(model, _k_label(k, r["layers"]), "activated",
                             scores[f"activated{k}"]["activated"],
                             cost["activated"], held[f"activated{k}"]["activated"]))
    return pd.DataFrame(rows).set_index(["model", "adapter", "policy"])


def _interval(a: dict) -> str:
    low, high = a["ci95_pct"]
    return f"{fmt(a['accuracy_pct'], 3)} [{fmt(low, 3)}–{fmt(high, 3)}]"


def _row(model: str, k: str, policy: str, s: dict, c: dict, accuracy: dict) -> dict:
    return {"model": model, "adapter": k, "policy": policy.replace("_", " "),
            "held-out accuracy % [95% interval]": _interval(accuracy),
            "max |Δlogit|": fmt(s["max_abs_logit_diff"], 3), "mean KL (nats)": fmt(s["kl_mean"], 3),
            "top-1 agree (%)": fmt(s["top1_agree_pct"], 4),
            "switch FLOPs": f"{c['flops']:.3g}", "switch time (ms)": fmt(1000 * c["seconds"], 3),
            "extra memory (KiB)": fmt(c["extra_bytes"] / 1024, 4)}


def chapter5_table(numbers: dict) -> pd.DataFrame:
    """Metric | article | this run: the article has no adapter switch; its nearest measurements
    are the exact cache, a chunk's cache computed in another context, and the shared prefix."""
    a = article()
    t2 = {row["operation"]: row for row in a["table2_approximations"]}
    chunk = t2["chunk_reuse_reindexed"]
    e2 = a["e2_prefix"]
    rows = {
        "exact reuse: mean KL / top-1 agreement (%)": {"article": "0 / 100 (exact fp32 cache, Pythia-160M)"},
        "tail patch: mean KL / top-1 agreement (%)": {"article": "— (not in the article)"},
        "stale cache: mean KL / top-1 agreement (%)": {
            "article": f"{fmt(chunk['kl'])} / {fmt(chunk['top1_pct'])} (nearest: chunk cached in another "
                       "context)"},
        "shared prefix, each context in its own pass: entries bit-identical": {
            "article": f"{e2['fp32']['bit_identical']}/{e2['n_prefixes']} prefixes (fp32, Pythia-160M)"},
        "tail patch time / full recompute, smallest k": {"article": "— (not in the article)"},
    }
    for model, r in numbers.items():
        col = f"this run: {model}"
        scores, k_min, k_max = r["switch"]["scores"], min(r["k_values"]), max(r["k_values"])
        act = scores[f"activated{k_max}"]["activated"]
        patch = scores[f"tail{k_max}"]["tail_patch"]
        stale = scores[f"tail{k_max}"]["stale"]
        rows["exact reuse: mean KL / top-1 agreement (%)"][col] = (
            f"{fmt(act['kl_mean'], 3)} / {fmt(act['top1_agree_pct'], 4)} (activated adapter, k = {k_max})")
        rows["tail patch: mean KL / top-1 agreement (%)"][col] = (
            f"{fmt(patch['kl_mean'], 3)} / {fmt(patch['top1_agree_pct'], 4)} (k = {k_max})")
        rows["stale cache: mean KL / top-1 agreement (%)"][col] = (
            f"{fmt(stale['kl_mean'], 3)} / {fmt(stale['top1_agree_pct'], 4)} (k = {k_max})")
        pm = r["patching"]
        rows["shared prefix, each context in its own pass: entries bit-identical"][col] = (
            f"yes, {pm['n_contexts']}/{pm['n_contexts']} pairs" if pm["prefix_kv_max_diff"] == 0
            else f"no: max |Δ| {fmt(pm['prefix_kv_max_diff'], 3)}")
        frac = r["cost"]["per_k"][str(k_min)]["tail_time_fraction"]
        rows["tail patch time / full recompute, smallest k"][col] = (f"{fmt(frac, 3)} (k/L = "
                                                                     f"{fmt(k_min / r['layers'], 3)})")
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "metric"
    return page_table(table)
