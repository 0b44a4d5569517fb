"""What chapter 5 shows: loss curves, accuracy against k, the cost and exactness of each switch
policy, the patching map, the side-by-side table and the texts the prose glues in — all built
from the results dict of `kvutils.switch.run`."""
from __future__ import annotations

import math

import pandas as pd

from .lora import POLICY_TEXT
from .switch import TOLERANCE
from .report import article, fmt

POLICY_STYLE = {"recompute": ("tab:blue", "o"), "stale": ("tab:red", "X"),
                "tail_patch": ("tab:green", "s"), "activated": ("tab:purple", "D")}


def _k_label(k: int, n_layers: int) -> str:
    return f"k = {k} (L)" if k == n_layers else f"k = {k}"


def _adapter_label(r: dict, name: str) -> str:
    a = r["training"]["adapters"][name]
    kind = "activated LoRA" if a["activated"] else "LoRA tail"
    return f"{kind}, {_k_label(a['k'], r['layers'])}"


def _title_model(model: str, r: dict) -> str:
    return f"{model} ({r['model_type']}, {r['layers']} layers)"


# --------------------------------------------------------------------------- figures


def plot_losses(numbers: dict):
    """Training loss per step of every adapter, one panel per model."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(numbers), figsize=(6.5 * len(numbers), 4.2), squeeze=False)
    for ax, (model, r) in zip(axes[0], numbers.items()):
        for name, a in r["training"]["adapters"].items():
            ax.plot(range(1, len(a["losses"]) + 1), a["losses"], marker="." if len(a["losses"]) < 40 else None,
                    linestyle="--" if a["activated"] else "-", label=_adapter_label(r, name))
        ax.set_xlabel("training step")
        ax.set_ylabel("cross-entropy of the label token (nats)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_title(f"Training loss — {_title_model(model, r)}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_accuracy(numbers: dict):
    """Per model, against k: (left) sense accuracy — the right label above the other sense's,
    chance 50% — and (right) label accuracy — the right label as the top-1 token of the vocabulary —
    on training and held-out words, with the base model's zero-shot accuracy as dotted lines and
    the activated adapter as a diamond."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(numbers), 2, figsize=(12.5, 4.4 * len(numbers)), squeeze=False)
    metrics = (("sense_pct", "sense accuracy (%): right label above the other"),
               ("label_top1_pct", "label accuracy (%): right label is the top-1 token"))
    for row, (model, r) in zip(axes, numbers.items()):
        tails = [(a["k"], a) for a in r["training"]["adapters"].values() if not a["activated"]]
        act = r["training"]["adapters"]["activated"]
        ks = [k for k, _ in tails]
        for ax, (metric, ylabel) in zip(row, metrics):
            for split, colour in (("train", "tab:blue"), ("heldout", "tab:orange")):
                word = "training words" if split == "train" else "held-out words"
                ax.plot(ks, [a[split][metric] for _, a in tails], marker="o", color=colour, label=f"LoRA tail, {word}")
                ax.axhline(r["training"]["zero_shot"][split][metric], color=colour, linestyle=":",
                           label=f"base model zero-shot, {word}")
                ax.scatter([act["k"]], [act[split][metric]], marker="D", s=60, color=colour, edgecolor="black",
                           zorder=3, label=f"activated LoRA (k = {act['k']}), {word}")
            if metric == "sense_pct":
                ax.axhline(50, color="grey", linewidth=1, label="chance (50%)")
            ax.set_xscale("log", base=2)
            ax.set_xticks(ks, [str(k) for k in ks])
            ax.minorticks_off()
            ax.set_ylim(-3, 105)
            ax.set_xlabel(f"k: adapted layers at the top of the model (of L = {r['layers']})")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.set_title(f"{'Sense' if metric == 'sense_pct' else 'Label'} accuracy against k — "
                         f"{_title_model(model, r)}", fontsize=10)
        row[0].legend(fontsize=7, loc="lower left", ncol=2)
    fig.tight_layout()
    return fig


def _floor(values: list[float], floor: float) -> list[float]:
    return [max(v, floor) for v in values]


def plot_cost_exactness(numbers: dict):
    """The chapter's main figure, per model: (left) each policy's switch time against its largest
    logit error vs the reference — exact results sit on the floor line; (right) the tail patch's
    time and FLOPs as a fraction of a full recompute, against k/L."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(numbers), 2, figsize=(12.5, 5.6 * len(numbers)), squeeze=False)
    floor = 1e-9
    for (ax, ax_frac), (model, r) in zip(axes, numbers.items()):
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
                ax.annotate(f"k={k}", (x, max(y, floor)), textcoords="offset points", xytext=offset, fontsize=7,
                            ha="left" if policy == "stale" else "center", color=colour)
        colour, marker = POLICY_STYLE["activated"]
        act = scores["activated"]["activated"]["max_abs_logit_diff"]
        ax.scatter([1000 * cost["activated"]["seconds"]], [max(act, floor)], color=colour, marker=marker, s=55,
                   label=POLICY_TEXT["activated"] + f" (k = {r['activated_k']}), against one pass")
        ax.axhline(floor, color="grey", linestyle=":", linewidth=1)
        ax.annotate("exact: 0 is drawn at 1e-9", (0.01, floor), xycoords=("axes fraction", "data"),
                    textcoords="offset points", xytext=(0, 4), fontsize=7, color="grey")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(floor / 30, None)
        ax.set_xlabel(f"time to build the adapter's cache for {cost['prefix_tokens']} prefix tokens (ms, log scale)")
        ax.set_ylabel("max |logit difference| vs reference")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
        ax.set_title(f"Cost vs exactness of each switch — {_title_model(model, r)}", fontsize=10)
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
        ax_frac.set_ylabel("cost of the switch as a fraction of a full recompute")
        ax_frac.grid(alpha=0.3)
        ax_frac.legend(fontsize=8, loc="upper left")
        ax_frac.set_title(f"Tail patch cost scales with k/L — {_title_model(model, r)}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_patch_map(numbers: dict):
    """Per model: answer flips (%) and mean change of the answer's log-odds when one position's
    cached K/V in one group of layers come from the opposite-sense context."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(len(numbers), 2, figsize=(13, 0.36 * max(len(r["patching"]["row_labels"])
                                                                        for r in numbers.values()) * len(numbers) + 2.2),
                             squeeze=False)
    for (ax_flip, ax_delta), (model, r) in zip(axes, numbers.items()):
        pm = r["patching"]
        flips = np.array(pm["flip_pct"], dtype=float)
        delta = np.array(pm["delta_logodds_mean"], dtype=float)
        bound = np.nanmax(np.abs(delta)) or 1.0
        for ax, values, cmap, vmin, vmax, unit in (
                (ax_flip, flips, "viridis", 0, 100, "answers flipped (%)"),
                (ax_delta, delta, "RdBu", -bound, bound, "mean change of log-odds (own − other label, nats)")):
            image = ax.imshow(values, aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax)
            fig.colorbar(image, ax=ax, label=unit, fraction=0.05)
            ax.set_xticks(range(len(pm["col_labels"])), pm["col_labels"], fontsize=7, rotation=45)
            ax.set_yticks(range(len(pm["row_labels"])), pm["row_labels"], fontsize=7)
            ax.axhline(pm["control_rows"] - 0.5, color="white", linewidth=2)
            ax.axhline(len(pm["row_labels"]) - 1.5, color="white", linewidth=2)
            ax.axvline(len(pm["col_labels"]) - 1.5, color="white", linewidth=2)
            ax.set_xlabel("layers whose cached K/V are copied (1-based)")
            ax.set_ylabel("position copied (prefix rows = control)")
        ax_flip.set_title(f"Answer flips — {_title_model(model, r)}, {_adapter_label(r, pm['adapter'])}", fontsize=9)
        ax_delta.set_title(f"Log-odds change — {pm['n_contexts']} contexts", fontsize=9)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- table and glue


def switch_table(numbers: dict) -> pd.DataFrame:
    """Per model, k and policy: the gap to the reference, accuracy, cost and extra memory."""
    rows = []
    for model, r in numbers.items():
        scores, cost = r["switch"]["scores"], r["cost"]
        for k in r["k_values"]:
            for policy in ("recompute", "tail_patch", "stale"):
                s, c = scores[f"tail{k}"][policy], cost["per_k"][str(k)][policy]
                rows.append(_row(model, _k_label(k, r["layers"]), policy, s, c))
        rows.append(_row(model, f"k = {r['activated_k']}", "activated", scores["activated"]["activated"],
                         cost["activated"]))
    return pd.DataFrame(rows).set_index(["model", "adapter", "policy"])


def _row(model: str, k: str, policy: str, s: dict, c: dict) -> dict:
    return {"model": model, "adapter": k, "policy": policy.replace("_", " "),
            "max |Δlogit|": fmt(s["max_abs_logit_diff"], 3), "mean KL (nats)": fmt(s["kl_mean"], 3),
            "top-1 agreement (%)": fmt(s["top1_agree_pct"], 4), "sense accuracy (%)": fmt(s["sense_pct"], 4),
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
        "exact reuse: mean KL / top-1 agreement (%)": {"article": f"0 / 100 (exact fp32 cache, Pythia-160M)"},
        "tail patch: mean KL / top-1 agreement (%)": {"article": "— (not in the article)"},
        "stale cache: mean KL / top-1 agreement (%)": {
            "article": f"{fmt(chunk['kl'])} / {fmt(chunk['top1_pct'])} (nearest: chunk cached in another context)"},
        "shared prefix: entries bit-identical in both contexts": {
            "article": f"{e2['fp32']['bit_identical']}/{e2['n_prefixes']} prefixes (fp32, Pythia-160M)"},
        "tail patch time / full recompute, smallest k": {"article": "— (not in the article)"},
    }
    for model, r in numbers.items():
        col = f"this run: {model}"
        scores, k_min, k_max = r["switch"]["scores"], min(r["k_values"]), max(r["k_values"])
        act = scores["activated"]["activated"]
        patch = scores[f"tail{k_max}"]["tail_patch"]
        stale = scores[f"tail{k_max}"]["stale"]
        rows["exact reuse: mean KL / top-1 agreement (%)"][col] = (
            f"{fmt(act['kl_mean'], 3)} / {fmt(act['top1_agree_pct'], 4)} (activated adapter)")
        rows["tail patch: mean KL / top-1 agreement (%)"][col] = (
            f"{fmt(patch['kl_mean'], 3)} / {fmt(patch['top1_agree_pct'], 4)} (k = {k_max})")
        rows["stale cache: mean KL / top-1 agreement (%)"][col] = (
            f"{fmt(stale['kl_mean'], 3)} / {fmt(stale['top1_agree_pct'], 4)} (k = {k_max})")
        pm = r["patching"]
        rows["shared prefix: entries bit-identical in both contexts"][col] = (
            "yes" if pm["prefix_kv_max_diff"] == 0 else f"no: max |Δ| {fmt(pm['prefix_kv_max_diff'], 3)}")
        frac = r["cost"]["per_k"][str(k_min)]["tail_time_fraction"]
        rows["tail patch time / full recompute, smallest k"][col] = f"{fmt(frac, 3)} (k/L = {fmt(k_min / r['layers'], 3)})"
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "metric"
    return table


def _stale_layers(n_layers: int, k: int, first: int) -> str:
    """Which layers of the base cache stay exact for a tail of depth k (1-based layer numbers)."""
    if first == 0:
        return "every layer's entries stale"
    if first >= n_layers:
        return "every layer's entries exact"
    def span(a: int, b: int) -> str:
        return f"layer {a}" if a == b else f"layers {a}–{b}"
    return f"{span(1, first)} exact, {span(first + 1, n_layers)} stale"


def _pct(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{fmt(value, 4)}%"


def chapter5_glue(numbers: dict, parameters: dict) -> dict[str, str]:
    """Every number the prose cites, as text."""
    out = {"models": ", ".join(numbers), "steps": str(parameters["steps"]), "rank": str(parameters["rank"]),
           "alpha": fmt(parameters["alpha"]), "lr": fmt(parameters["lr"]), "targets": parameters["targets"],
           "train_words": parameters["train_words"].replace(",", ", "),
           "heldout_words": parameters["heldout_words"].replace(",", ", "),
           "marker": repr(parameters["marker"]), "dtype": parameters["dtype"],
           "tolerance": f"largest allowed difference {fmt(TOLERANCE[parameters['dtype']])} in {parameters['dtype']}"}
    parts = {key: [] for key in ("setup", "zero_shot", "accuracy", "exact", "stale", "activated", "cost",
                                 "memory", "patching", "patch_where", "control", "timings")}
    for model, r in numbers.items():
        tr, L = r["training"], r["layers"]
        z = tr["zero_shot"]
        parts["setup"].append(
            f"{model}: L = {L} layers, k ∈ {{{', '.join(map(str, r['k_values']))}}}, {r['n_train_examples']} "
            f"training and {r['n_heldout_examples']} held-out examples")
        parts["zero_shot"].append(f"{model}: {_pct(z['train']['sense_pct'])} on the training words and "
                                  f"{_pct(z['heldout']['sense_pct'])} on the held-out words (label as top-1 token: "
                                  f"{_pct(z['train']['label_top1_pct'])} / {_pct(z['heldout']['label_top1_pct'])})")
        parts["accuracy"].append(f"{model}: " + "; ".join(
            f"{_adapter_label(r, name)}: {_pct(a['train']['sense_pct'])} train, {_pct(a['heldout']['sense_pct'])} "
            f"held out (label top-1 {_pct(a['train']['label_top1_pct'])} / {_pct(a['heldout']['label_top1_pct'])}; "
            f"loss {fmt(a['losses'][0], 3)} → {fmt(a['losses'][-1], 3)} in {fmt(a['train_seconds'], 3)} s)"
            for name, a in tr["adapters"].items()))
        sc, layers = r["switch"]["scores"], r["switch"]["cache_layers"]
        parts["exact"].append(f"{model}: largest |logit difference| of the tail patch "
                              + ", ".join(f"{fmt(sc[f'tail{k}']['tail_patch']['max_abs_logit_diff'], 3)} (k = {k})"
                                          for k in r["k_values"])
                              + f"; largest K/V difference {fmt(max(max(layers[f'tail{k}']['tail_patch']) for k in r['k_values']), 3)}")
        parts["stale"].append(f"{model}: " + "; ".join(
            f"k = {k}: max |Δlogit| {fmt(sc[f'tail{k}']['stale']['max_abs_logit_diff'], 3)}, mean KL "
            f"{fmt(sc[f'tail{k}']['stale']['kl_mean'], 3)}, top-1 agreement {_pct(sc[f'tail{k}']['stale']['top1_agree_pct'])}, "
            f"sense accuracy {_pct(sc[f'tail{k}']['stale']['sense_pct'])} vs {_pct(sc[f'tail{k}']['recompute']['sense_pct'])} "
            f"recomputed; {_stale_layers(L, k, r['first_changed_layer'][str(k)])}" for k in r["k_values"]))
        act, tail = sc["activated"]["activated"], sc[f"tail{r['activated_k']}"]["recompute"]
        prefix = [d for d in layers["activated"]["prefix_vs_base"] if d == d]
        parts["activated"].append(
            f"{model}: the activated adapter (k = {r['activated_k']}) reusing the whole base cache is "
            f"{fmt(act['max_abs_logit_diff'], 3)} from one pass over the whole sequence (top-1 agreement "
            f"{_pct(act['top1_agree_pct'])}); its prefix K/V differ from the base's by {fmt(max(prefix), 3)}; "
            f"sense accuracy {_pct(act['sense_pct'])} vs {_pct(tail['sense_pct'])} for the LoRA tail of the same k")
        cost = r["cost"]
        parts["cost"].append(f"{model} ({cost['prefix_tokens']}-token prefix): full recompute "
                             + ", ".join(f"{fmt(1000 * cost['per_k'][str(k)]['recompute']['seconds'], 3)} ms"
                                         for k in r["k_values"][:1])
                             + "; tail patch as a share of it: " + ", ".join(
            f"k = {k}: {fmt(cost['per_k'][str(k)]['tail_time_fraction'], 3)} of the time and "
            f"{fmt(cost['per_k'][str(k)]['tail_flops_fraction'], 3)} of the FLOPs (k/L = {fmt(k / L, 3)})"
            for k in r["k_values"]))
        parts["memory"].append(f"{model}: {fmt(cost['boundary_bytes_per_token'] / 1024, 4)} KiB per token "
                               f"({r['hidden_size']} numbers in {parameters['dtype']})")
        pm = r["patching"]
        flips = pm["flip_pct"]
        best = max(((v, i, j) for i, row in enumerate(flips) for j, v in enumerate(row)
                    if v == v and i >= pm["control_rows"] and i < len(flips) - 1), default=(float("nan"), 0, 0))
        parts["patching"].append(
            f"{model} ({_adapter_label(r, pm['adapter'])}, {pm['n_contexts']} contexts, clean sense accuracy "
            f"{_pct(pm['clean_sense_pct'])}): copying the whole continuation in all layers flips "
            f"{_pct(flips[-1][-1])} of the answers; the largest cell below the control rows and above the "
            f"whole-continuation row flips {_pct(best[0])} ({pm['row_labels'][best[1]]}, layers "
            f"{pm['col_labels'][best[2]]})")
        whole = flips[-1][:-1]  # the whole continuation, per layer group
        top = max(range(len(whole)), key=lambda j: whole[j] if whole[j] == whole[j] else -1)
        parts["patch_where"].append(
            f"{model}: copying the whole continuation flips most answers in layers {pm['col_labels'][top]} "
            f"({_pct(whole[top])}); the adapter of this map is on layers {L - pm['k'] + 1}–{L}")
        parts["control"].append(
            f"{model}: largest |change of log-odds| in the control rows {fmt(pm['control_max_abs_delta'], 3)} "
            f"(the two caches' prefix entries differ by {fmt(pm['prefix_kv_max_diff'], 3)})")
        t = r["timings"]
        parts["timings"].append(f"{model}: training {fmt(t['training_s'], 3)} s, switch {fmt(t['switch_s'], 3)} s, "
                                f"cost benchmark {fmt(t['cost_s'], 3)} s, patching {fmt(t['patching_s'], 3)} s")
    out.update({key: "; ".join(values) for key, values in parts.items()})
    return out
