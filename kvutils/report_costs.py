"""What chapter 4 shows: decode-step cost (E4, Chart 3), bytes per token (Table 1, Chart 4) and the
approximation table (Table 2, Chart 5), each beside the article's figures, built from results."""
from __future__ import annotations

import pandas as pd

from .report import article, fmt


def _table(rows: dict[str, dict[str, str]], index: str = "metric") -> pd.DataFrame:
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = index
    return table


# --------------------------------------------------------------------------- E4: decode cost


def decode_table(decode: dict) -> pd.DataFrame:
    """decode[model] = {"bandwidth_gb_s", "steps": [{context, cached_ms, uncached_ms, speedup,
    analytical_ratio, bound_ms}, ...]}."""
    e4 = article()["e4_decode_time"]
    rows: dict[str, dict[str, str]] = {}
    for ctx_key, ctx in (("ctx_128", 128), ("ctx_2000", 2000)):
        a = e4[ctx_key]
        art = {
            f"{ctx} tokens: cached step (ms)": fmt(a["cached_ms"]),
            f"{ctx} tokens: uncached step (ms)": fmt(a["uncached_ms"]),
            f"{ctx} tokens: measured speed-up": fmt(a.get("speedup", a["uncached_ms"] / a["cached_ms"]), 4),
            f"{ctx} tokens: analytical compute ratio": fmt(a["analytical_compute_ratio"]),
            f"{ctx} tokens: bandwidth bound of the cached step (ms)": "not reported",
        }
        for metric, value in art.items():
            rows.setdefault(metric, {})["article (Pythia-160M, 6-core CPU)"] = value
    for model, r in decode.items():
        col = f"this run: {model}"
        for step in r["steps"]:
            c = step["context"]
            ours = {
                f"{c} tokens: cached step (ms)": fmt(step["cached_ms"], 4),
                f"{c} tokens: uncached step (ms)": fmt(step["uncached_ms"], 4),
                f"{c} tokens: measured speed-up": fmt(step["speedup"], 4),
                f"{c} tokens: analytical compute ratio": fmt(step["analytical_ratio"]),
                f"{c} tokens: bandwidth bound of the cached step (ms)": fmt(step["bound_ms"], 3),
            }
            for metric, value in ours.items():
                rows.setdefault(metric, {})[col] = value
    return _table(rows)


def plot_decode(decode: dict):
    """Chart 3: one decode step with and without the cache, per context length and model (log
    scale), with the memory-bandwidth bound of the cached step."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 4.5))
    labels, cached, uncached, bound = [], [], [], []
    for model, r in decode.items():
        for step in r["steps"]:
            labels.append(f"{model}\n{step['context']} tokens")
            cached.append(step["cached_ms"])
            uncached.append(step["uncached_ms"])
            bound.append(step["bound_ms"])
    x = np.arange(len(labels))
    ax.bar(x - 0.2, cached, 0.4, label="with the cache")
    ax.bar(x + 0.2, uncached, 0.4, label="without the cache (recompute everything)")
    ax.scatter(x - 0.2, bound, marker="_", s=400, color="black", zorder=3,
               label="bandwidth bound of the cached step")
    for xi, c, u in zip(x, cached, uncached):
        ax.text(xi + 0.2, u * 1.1, f"{u / c:.1f}×", ha="center", fontsize=8)
    ax.set_yscale("log")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set_ylabel("time of one decode step (ms, log scale)")
    ax.set_xlabel("model and context length")
    ax.set_title(f"What the cache buys: one decode step, median of repeats — models: {', '.join(decode)}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Table 1: bytes


def bytes_table(bytes_rows: list[dict]) -> pd.DataFrame:
    """Table 1: one row per configuration — the article's six and ours (ours with the bytes of a
    real filled cache beside the formula)."""
    rows = {}
    for r in bytes_rows:
        rows[r["model"]] = {
            "attention": r["attention"],
            "layers": str(r["layers"]),
            "KV heads": "—" if r.get("kv_heads") is None else str(r["kv_heads"]),
            "head dim": "—" if r.get("head_dim") is None else str(r["head_dim"]),
            "KiB per token (formula)": fmt(r["kib_per_token"]),
            "GiB per 128K tokens (formula)": fmt(r["gib_per_128k"], 4),
            "article": fmt(r["article_kib_per_token"]) + " / " + fmt(r["article_gib_per_128k"], 4)
            if r.get("article_kib_per_token") is not None else "—",
            "real cache, measured (KiB per token)": fmt(r["measured_kib_per_token"], 5)
            if r.get("measured_kib_per_token") is not None else "—",
        }
    return _table(rows, "configuration")


def plot_bytes(bytes_rows: list[dict]):
    """Chart 4: KV-cache size of a 128K-token sequence per configuration."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    names = [r["model"] for r in bytes_rows]
    values = [r["gib_per_128k"] for r in bytes_rows]
    colours = ["tab:blue" if r.get("source") == "published" else "tab:orange" for r in bytes_rows]
    ax.barh(names, values, color=colours)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.3g}", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("KV cache of one 128K-token sequence (GiB, 16-bit values, log scale)")
    ax.set_ylabel("configuration")
    ax.set_title("The price of exactness: cache memory per sequence\n"
                 "(blue: published configurations; orange: this book's models, formula at 16 bits)", fontsize=10)
    fig.tight_layout()
    return fig
