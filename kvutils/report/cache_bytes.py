"""Chapter 4's Table 1 and Chart 4: the KV cache's bytes per token and per 128K-token sequence, the
article's six published configurations beside this book's models (the formula, what the cache
holds with its sliding-window layers capped, and the bytes of a real filled cache)."""
from __future__ import annotations

import math

import pandas as pd

from kvutils.report.figures import styled
from kvutils.report.tables import rows_table
from kvutils.report.text import fmt

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
            "GiB per 128K tokens: formula → held": fmt(r["gib_per_128k"], 4) + " → " + fmt(held_128k(r), 4),
            "article": fmt(r["article_kib_per_token"]) + " / " + fmt(r["article_gib_per_128k"], 4)
            if r.get("article_kib_per_token") is not None else "—",
            "fp32 cache check (KiB per token): formula → held → measured":
                f"{fmt(r['formula_kib_per_token_fp32'], 4)} → {fmt(r['held_kib_per_token_fp32'], 4)} → "
                f"{fmt(r['measured_kib_per_token'], 4)} at {r['check_tokens']} tokens" + _windowed(r)
                if r.get("measured_kib_per_token") is not None else "—",
        }
    return rows_table(rows, "configuration")


def _windowed(row: dict) -> str:
    """Where sliding-window layers keep only their window: the share of the formula's bytes held."""
    share = row["held_kib_per_token_fp32"] / row["formula_kib_per_token_fp32"]
    return f" ({fmt(100 * share, 3)} % of the formula: its sliding-window layers keep their window)" \
        if share < 1 else ""


def held_128k(row: dict) -> float:
    """GiB a 128K-token sequence's cache holds: the formula, but a sliding-window layer capped at its
    window (files written before the held figure was recorded: the formula)."""
    return row.get("gib_per_128k_held", row["gib_per_128k"])


@styled
def plot_bytes(bytes_rows: list[dict]):
    """Chart 4: KV-cache size of a 128K-token sequence per configuration, on a log axis whose tick
    labels are plain numbers that do not overlap (`report.overlapping_text`)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    names = [r["model"] for r in bytes_rows]
    values = [held_128k(r) for r in bytes_rows]
    colours = ["tab:blue" if r.get("source") == "published" else "tab:orange" for r in bytes_rows]
    left = 10 ** math.floor(math.log10(min(values)))  # bars start at a power of ten below the smallest
    ax.barh(names, [v - left for v in values], left=left, color=colours)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.3g}", va="center")
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlim(left, max(values) * 4)  # room for the value beside the longest bar
    # labelled ticks at 1, 2, 5 × 10^k over a short range, at powers of ten over a long one; the
    # minor ticks unlabelled (matplotlib labels them on a short range, and they overlap)
    decades = math.log10(max(values) * 4 / left)
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0,) if decades > 3 else (1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("KV cache held for one 128K-token sequence (GiB, 16-bit values, log scale)")
    ax.set_ylabel("configuration")
    ax.set_title("The price of exactness: cache memory per sequence\n"
                 "(blue: published configurations;\norange: this book's models, windowed layers capped)")
    fig.tight_layout()
    return fig
