"""Chapter 4's long-range retrieval section: the exact cache's own accuracy (the gate), accuracy
against the bytes held per method and regime (a chart), accuracy by depth (a table), the setup and
kvpress's observations beside ours. The verdicts are `kvutils.report.chapter4_tables`'."""
from __future__ import annotations

import numpy as np
import pandas as pd

from kvutils.cache.registry import parse_op
from kvutils.core import compare, haystack
from kvutils.report.chapter4_verdicts import tau_once
from kvutils.report.figures import log_x_ticks, placeholder, styled
from kvutils.report.frontier import chart_colours, method_named
from kvutils.report.names import human_label, method_name
from kvutils.report.tables import PageTable, page_table, rows_table, verdict_text
from kvutils.studies.cache_approximations.retrieval import QUESTION_WINDOW, frontier_label

REGIME_MARKERS = {"agnostic": "o", "aware": "^"}
REGIME_WORDS = {"agnostic": "question after compression", "aware": "question in the compressed prefill"}
NOT_HAYSTACKS = ("kl_vs_retrieval",)


def haystacks(model_result: dict) -> dict:
    return {k: v for k, v in model_result.items() if k not in NOT_HAYSTACKS}


def short(label: str) -> str:
    """A method's label as the page shows it: "SnapKV (evicts 50 %)", "KIVI 4-bit", "bfloat16 cache"."""
    return human_label(label)


def method_of(label: str) -> str:
    return method_named(label.split("@")[0].split(":")[0])


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _exact_bytes(result: dict) -> float:
    """The exact cache's bytes after the agnostic prefill (mean over prompts): the chart's 100 %."""
    return result["exact"]["held_bytes"]


def retrieval_points(retrieval: dict) -> pd.DataFrame:
    rows = []
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            full = _exact_bytes(r)
            for label, entry in r["ops"].items():
                for regime in REGIME_MARKERS:
                    e = entry[regime]
                    rows.append({"model": model, "haystack": hay, "method": method_of(label), "label": label,
                                 "regime": regime, "held % of exact": 100 * e["mean_held_bytes"] / full,
                                 "needle readable %": needle_share(e), "accuracy %": 100 * e["accuracy"]})
    return pd.DataFrame(rows, columns=["model", "haystack", "method", "label", "regime", "held % of exact",
                                       "needle readable %", "accuracy %"])


def needle_share(regime_entry: dict) -> float:
    """The needle's entries the answer can read, % over every layer, KV head and prompt (NaN for a
    results file written before the needle was recorded)."""
    mean = regime_entry.get("needle_kept_mean")
    return 100 * float(np.mean(mean)) if mean else float("nan")


@styled
def plot_retrieval(retrieval: dict):
    """Accuracy against held bytes, one panel per model and haystack: one colour per method, one
    marker per regime, the exact cache's accuracy as a dashed line."""
    return _scatter(retrieval, "held % of exact", "bytes held after the prefill (% of exact)",
                    "Long-range retrieval: keys retrieved vs bytes held")


@styled
def plot_needle(retrieval: dict):
    """Accuracy against the share of the needle's own entries the answer can still read (every layer
    and KV head, mean over the prompts): where a method's misses come from losing the needle itself."""
    return _scatter(retrieval, "needle readable %", "needle entries readable\n(%, layers × heads)",
                    "Long-range retrieval: keys retrieved vs the needle's entries kept")


def _scatter(retrieval: dict, x: str, xlabel: str, title: str):
    import matplotlib.pyplot as plt

    panels = [(m, h) for m, result in retrieval.items() for h in haystacks(result)]
    if not panels:
        return placeholder(title.split(":")[0] + ": no model",
                           "retrieval not run (retrieval_models is empty)")
    cols = 2 if len(panels) > 1 else 1
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5, 3.2 * rows + 1.2), squeeze=False, sharey=True)
    points = retrieval_points(retrieval)
    colours = chart_colours(points["method"])
    for ax, (model, hay) in zip(axes.flat, panels):
        exact = retrieval[model][hay]["exact"]["accuracy"]
        ax.axhline(100 * exact, color="black", ls="--", lw=1)
        sub = points[(points["model"] == model) & (points["haystack"] == hay)]
        for _, p in sub.iterrows():
            ax.plot(p[x], p["accuracy %"], marker=REGIME_MARKERS[p["regime"]], color=colours[p["method"]],
                    ms=6, mec="white", mew=0.5, lw=0, alpha=0.85)
        if sub.empty:
            ax.text(0.5, 0.5, "no method judged:\nthe exact cache is below the 80 % gate", ha="center",
                    va="center",
                    transform=ax.transAxes, fontsize=10)
        ax.set_title(f"{model}, {hay}", fontsize=11)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("keys retrieved (%)")
        ax.set_ylim(-5, 105)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    handles = [plt.Line2D([], [], color=c, marker="o", lw=0, label=method_name(m))
               for m, c in colours.items()]
    handles += [plt.Line2D([], [], color="0.3", marker=mk, lw=0, label=REGIME_WORDS[r])
                for r, mk in REGIME_MARKERS.items()]
    handles.append(plt.Line2D([], [], color="black", ls="--", label="exact cache"))
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=9)
    fig.suptitle(f"{title}\nmodels: {', '.join(retrieval)}")
    legend_rows = -(-len(handles) // 3)
    fig.tight_layout(rect=(0, 0.035 * legend_rows + 0.02, 1, 1))
    return fig


def exact_table(retrieval: dict):
    """Per model, haystack and context: the exact cache's accuracy by depth, and the gate."""
    rows = []
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            for context in r["contexts"]:
                rec = [x for x in r["exact"]["per_prompt"] if x["context"] == context]
                depths = r["exact"]["by_depth"].get(str(context), {})
                rows.append({"model": model, "haystack": hay, "context (tokens)": context,
                             "prompts": len(rec),
                             **{f"depth {d}": _pct(a) for d, a in depths.items()},
                             "all": _pct(sum(x["correct"] for x in rec) / len(rec)),
                             "judged (exact ≥ 80 %)": "yes" if r["gate"][str(context)] else "no"})
            for context, below in r.get("not_run", {}).items():
                rows.append({"model": model, "haystack": hay, "context (tokens)": int(context), "prompts": 0,
                             "all": "not run", "judged (exact ≥ 80 %)": f"no: below the gate at {below}"})
    table = pd.DataFrame(rows).fillna("")
    table.insert(0, "model, haystack", table.pop("model") + ", " + table.pop("haystack"))
    return page_table(table.set_index("model, haystack"))  # rows headed by what they are, not 0, 1, 2 …


def depth_table(retrieval: dict):
    """Per model, haystack and method: accuracy by depth in each regime (over every context), and
    the bytes it holds."""
    rows = []
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            full = _exact_bytes(r)
            for label, entry in r["ops"].items():
                row = {"model, haystack": f"{model}, {hay}", "method": short(label),
                       "held %": f"{100 * entry['agnostic']['mean_held_bytes'] / full:.0f}"}
                for regime, when in (("agnostic", "after"), ("aware", "with")):
                    per = {}
                    for x in entry[regime]["per_prompt"]:
                        per.setdefault(x["depth"], []).append(x["correct"])
                    for d in sorted(per):
                        row[f"{when} q., {d:g}"] = f"{100 * sum(per[d]) / len(per[d]):.0f}"
                rows.append(row)
    table = pd.DataFrame(rows).fillna("")
    # rows headed by the method, not 0, 1, 2 …
    return page_table(table.set_index("method") if rows else table)


# --------------------------------------------------------------------------- the texts kept as evidence


def kl_points(retrieval: dict, frontier: dict) -> pd.DataFrame:
    """One row per (model, level, method) of the KL-against-retrieval comparison: the method's mean KL
    on the frontier with its 95 % bootstrap interval over the documents, and the keys it retrieved
    (in the comparison's regime, over every gated prompt) with their Clopper–Pearson interval; τ
    with each method identical by construction to another counted once (`tau_once`, as the τ table)."""
    rows = []
    for model, result in retrieval.items():
        regime = (result.get("kl_vs_retrieval") or {}).get("regime", "aware")
        levels, _ = tau_once((frontier or {}).get(model), result, regime)
        per_doc = {frontier_label(spec, r.get("level")): r["per_doc_kl"]
                   for spec, r in (frontier.get(model) or {}).get("ops", {}).items()}
        correct: dict[str, list[bool]] = {}
        for hay in haystacks(result).values():
            for label, entry in hay["ops"].items():
                records = entry[regime]["per_prompt"]
                correct.setdefault(label, []).extend(bool(x["correct"]) for x in records)
        for level, v in levels.items():
            for label in v["methods"]:
                kl_lo, kl_hi = compare.mean_interval(per_doc[label])
                right, n = sum(correct[label]), len(correct[label])
                lo, hi = compare.proportion_interval(right, n)
                rows.append({"model": model, "level": level, "method": method_of(label), "label": label,
                             "mean KL": v["mean_kl"][label], "kl_lo": kl_lo, "kl_hi": kl_hi,
                             "accuracy %": 100 * right / n, "acc_lo": 100 * lo, "acc_hi": 100 * hi, "n": n,
                             "tau": v["tau"], "tau_ci": v["ci95"]})
    return pd.DataFrame(rows)


@styled
def plot_kl_vs_retrieval(retrieval: dict, frontier: dict):
    """The KL-against-retrieval comparison as a scatter, one panel per model and compression level:
    each method's mean KL (log scale) against the keys it retrieved, both with their 95 % intervals,
    and Kendall's τ with its interval in the panel's title (agreement is τ < 0)."""
    import matplotlib.pyplot as plt

    title, points = "Does the KL frontier predict retrieval?", kl_points(retrieval, frontier)
    if points.empty:
        return placeholder(title, "no level has three methods scored in both tests")
    panels = list(dict.fromkeys(zip(points["model"], points["level"])))
    cols = 2 if len(panels) > 1 else 1
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.5, 3.4 * rows + 1.6), squeeze=False, sharey=True)
    colours = chart_colours(points["method"])
    for i, (ax, (model, level)) in enumerate(zip(axes.flat, panels)):
        sub = points[(points["model"] == model) & (points["level"] == level)]
        for _, p in sub.iterrows():
            ax.errorbar(p["mean KL"], p["accuracy %"], xerr=[[p["mean KL"] - p["kl_lo"]],
                                                             [p["kl_hi"] - p["mean KL"]]],
                        yerr=[[p["accuracy %"] - p["acc_lo"]], [p["acc_hi"] - p["accuracy %"]]], fmt="o",
                        color=colours[p["method"]], ms=6, mec="white", mew=0.5, capsize=2, lw=1, alpha=0.85)
        tau, ci = sub["tau"].iloc[0], sub["tau_ci"].iloc[0]
        interval = f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else ""
        ax.set_title(f"{model}, evicts {100 * float(level):.0f} %\nKendall's τ = {tau:+.2f}{interval}")
        log_x_ticks(ax)
        bottom, left = i >= len(panels) - cols, i % cols == 0  # axis labels once per column and row
        ax.set_xlabel("mean KL from the exact cache\n(nats, log scale)" if bottom else "")
        ax.set_ylabel(f"keys retrieved (%, n = {sub['n'].iloc[0]})" if left else "")
        ax.set_ylim(-5, 105), ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    handles = [plt.Line2D([], [], color=c, marker="o", lw=0, label=method_name(m))
               for m, c in colours.items()]
    models = ", ".join(dict.fromkeys(points["model"]))
    fig.suptitle(f"{title}\nOne point per method, 95 % intervals ({models})")
    fig.tight_layout()
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=4, frameon=False)
    return fig


KVPRESS = ("kvpress's published plots (Llama-3.1-8B, RULER 4k) show SnapKV at 50 % keeping about 89 of 96 "
           "points with the question in the compressed context and about 70 without, and random eviction "
           "beating SnapKV on a single needle at 10 % compression. Ours, beside them: keys retrieved over "
           "every context of the haystack, on the haystacks where the exact cache passed its gate.")


def kvpress_table(retrieval: dict) -> PageTable | None:
    """Beside kvpress's published observations (`KVPRESS`): SnapKV at 0.5 with and without the
    question, random eviction against SnapKV at 0.25, and SnapKV at 0.25 observing the question's
    tokens only against its default window (with the question in the prefill; paired over prompts),
    with the share of the needle's entries each keeps that the answer can read."""
    rows = {}
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            if not any(r["gate"].values()):
                continue
            ops, row = r["ops"], {}
            if "snapkv@0.5" in ops:
                snap = ops["snapkv@0.5"]
                row["SnapKV 0.5: question in the prefill / after"] = (f"{_pct(snap['aware']['accuracy'])} / "
                                                                       f"{_pct(snap['agnostic']['accuracy'])}")
            rand, snap25 = ops.get("random@0.25"), ops.get("snapkv@0.25")
            asked = ops.get(f"{QUESTION_WINDOW}@0.25")
            if rand and snap25:
                row["question after, 0.25: random / SnapKV"] = (f"{_pct(rand['agnostic']['accuracy'])} / "
                                                                f"{_pct(snap25['agnostic']['accuracy'])}")
            if asked and snap25:
                row.update(_question_window(snap25, asked, rand))
            rows[f"{model}, {hay}"] = row
    return rows_table(rows, "model, haystack") if rows else None


def _question_window(snap: dict, asked: dict, rand: dict | None) -> dict[str, str]:
    """SnapKV at 0.25 observing the question's tokens only against its default window (the question in
    the prefill): keys retrieved, paired over the prompts, and the needle's entries each can read."""
    window = parse_op(next(iter(asked["specs"].values()))).setting("window")
    default = parse_op(next(iter(snap["specs"].values()))).setting("window")
    a, b = asked["aware"], snap["aware"]
    test = compare.paired([float(x["correct"]) for x in a["per_prompt"]],
                          [float(x["correct"]) for x in b["per_prompt"]], "question", "default",
                          unit="prompts")
    readable = "—"
    if np.isfinite(needle_share(a)):
        readable = f"{needle_share(a):.0f} / {needle_share(b):.0f}"
        readable += f" ({needle_share(rand['aware']):.0f})" if rand else ""
    return {"question in the prefill, SnapKV 0.25 observing the question only / its default window":
            f"{_pct(a['accuracy'])} ({window} tokens) / {_pct(b['accuracy'])} ({default}), "
            f"{verdict_text(test)} (p = {test.p:.2g})",
            "needle's entries readable, % (random)": readable}


def needle_examples() -> dict[str, str]:
    """The two needles as a prompt holds them, from the templates the prompts are built with (a word
    of the study and a key of the needle's length; each prompt draws its own)."""
    magic = haystack.MAGIC_NEEDLE.format(word="bank", key="4817263"[:haystack.KEY_DIGITS["magic"]]).strip()
    passkey = haystack.PASSKEY_NEEDLE.format(key="48213"[:haystack.KEY_DIGITS["passkey"]]).strip()
    return {"needle_magic": f"“{magic}”", "needle_passkey": f"“{passkey}”"}


def setup_table(retrieval: dict) -> PageTable | None:
    """The retrieval test's setup, per model and haystack: its needle, prompts, contexts and methods
    (each method a row of the verdict table)."""
    rows = {}
    for model, result in retrieval.items():
        for hay, r in haystacks(result).items():
            rows[f"{model}, {hay}"] = {
                "needle": "RULER's magic number" if r["prompts"] and r["prompts"][0]["word"]
                else "the pass key",
                "prompts": str(len(r["prompts"])), "contexts (tokens)": ", ".join(map(str, r["contexts"])),
                "methods": str(len(r["ops"])), "regimes": str(len(REGIME_WORDS))}
    return rows_table(rows, "model, haystack") if rows else None
