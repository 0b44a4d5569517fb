"""Turning results into what the book shows: the article's figures beside ours, number formatting,
and the chapter-1 figure. Every number in the prose is formatted here from a results dict, never
typed by hand."""
from __future__ import annotations

import json
from functools import lru_cache

import pandas as pd

from .paths import REPO_ROOT

ARTICLE_FIGURES = REPO_ROOT / "data" / "article_figures.json"


@lru_cache(maxsize=1)
def article() -> dict:
    """The article's reference figures (data/article_figures.json)."""
    return json.loads(ARTICLE_FIGURES.read_text())


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


def rows_table(rows: dict[str, dict[str, str]], index: str = "metric") -> pd.DataFrame:
    """{row: {column: text}} as a table, "—" where a column has no value for a row."""
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = index
    return table


def fraction(count: int, total: int) -> str:
    return f"{count}/{total}"


def chapter1_table(numbers: dict) -> pd.DataFrame:
    """Metric | article (Pythia) | this run (one column per model). Rows follow the article's E1/E2."""
    a = article()
    e1, e2 = a["e1_decode"], a["e2_prefix"]
    art = {
        "fp32: identical sequences": ", ".join(
            f"{fraction(v['identical'], v['n'])} ({m})" for m, v in e1["fp32"].items()),
        "fp32: max |logit diff|": ", ".join(f"{fmt(v['max_logit_diff'])} ({m})" for m, v in e1["fp32"].items()),
        "fp32: median logit std": ", ".join(f"{fmt(v['median_logit_std'])} ({m})" for m, v in e1["fp32"].items()),
        "fp64: identical sequences": fraction(e1["fp64"]["pythia-160m"]["identical"], e1["fp64"]["pythia-160m"]["n"]),
        "fp64: max |logit diff|": fmt(e1["fp64"]["pythia-160m"]["max_logit_diff"]),
        "argmax agreement (%)": fmt(e1["argmax_agreement_pct"]),
        "fp32: prefixes with bit-identical K/V": fraction(e2["fp32"]["bit_identical"], e2["n_prefixes"]),
        "fp64: prefixes with bit-identical K/V": fraction(e2["fp64"]["bit_identical"], e2["n_prefixes"]),
        "fp64: residue across continuations": fmt(e2["fp64"]["residue"]),
        "fp32: max key diff, alone vs inside": fmt(e2["fp32"]["alone_vs_inside_max_key_diff"]),
        "fp64: max key diff, alone vs inside": fmt(e2["fp64"]["alone_vs_inside_max_key_diff"]),
    }
    rows = {metric: {"article (Pythia)": value} for metric, value in art.items()}
    for model, by_dtype in numbers.items():
        column = f"this run: {model}"
        for dtype, r in by_dtype.items():
            p = "fp32" if dtype == "float32" else "fp64"
            d, x = r["decode"], r["prefixes"]
            ours = {
                f"{p}: identical sequences": fraction(d["identical"], d["n_prompts"]),
                f"{p}: max |logit diff|": fmt(d["max_logit_diff"]),
                f"{p}: median logit std": fmt(d["median_logit_std"]),
                f"{p}: prefixes with bit-identical K/V": fraction(x["bit_identical"], x["n_prefixes"]),
                f"{p}: residue across continuations": fmt(x["max_diff_across_continuations"]),
                f"{p}: max key diff, alone vs inside": fmt(x["max_key_diff_alone_vs_inside"]),
            }
            agreement = rows.setdefault("argmax agreement (%)", {})
            agreement[column] = min(agreement.get(column, "100"), fmt(d["argmax_agreement_pct"]), key=float)
            for metric, value in ours.items():
                rows.setdefault(metric, {})[column] = value
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("not run")
    table.index.name = "metric"
    return table


def plot_chapter1(numbers: dict):
    """Per-layer max |Δkey| between a prefix computed alone and inside a longer sequence, per model
    and dtype (depth normalised so models of different depth share an axis)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for model, by_dtype in numbers.items():
        for dtype, r in by_dtype.items():
            per_layer = r["prefixes"]["per_layer_max_key_diff_alone_vs_inside"]
            n = len(per_layer)
            depth = [(i + 1) / n for i in range(n)]
            # a bit-identical layer (0) has no place on a log axis: draw it at the floor
            floor = 1e-18
            ax.plot(depth, [max(v, floor) for v in per_layer], marker="o", markersize=3,
                    linestyle="-" if dtype == "float32" else "--", label=f"{model}, {dtype}")
    ax.set_yscale("log")
    ax.set_ylim(bottom=5e-19)
    ax.axhline(1e-18, color="grey", linewidth=0.8, linestyle=":")
    ax.text(0.01, 1.4e-18, "bit-identical (0)", fontsize=8, color="grey", transform=ax.get_yaxis_transform())
    ax.set_xlabel("layer depth (layer index / number of layers)")
    ax.set_ylabel("max |Δ key|, alone vs inside (log scale)")
    ax.set_title("Prefix keys alone vs inside a longer sequence, per layer\n"
                 f"models: {', '.join(numbers)}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def chapter1_glue(numbers: dict) -> dict[str, str]:
    """Short texts the chapter's prose glues in, each built from the results."""
    out = {}
    for dtype, tag in (("float32", "fp32"), ("float64", "fp64")):
        decode, prefixes = [], []
        for model, by_dtype in numbers.items():
            if dtype not in by_dtype:
                continue
            d, x = by_dtype[dtype]["decode"], by_dtype[dtype]["prefixes"]
            decode.append(f"{fraction(d['identical'], d['n_prompts'])} identical sequences on {model} "
                          f"(max logit difference {fmt(d['max_logit_diff'])})")
            prefixes.append(f"{fraction(x['bit_identical'], x['n_prefixes'])} bit-identical on {model} "
                            f"(largest difference {fmt(x['max_diff_across_continuations'])}; "
                            f"alone vs inside: {fmt(x['max_key_diff_alone_vs_inside'])})")
        out[f"{tag}_decode"] = "; ".join(decode) or f"not run ({dtype} not in dtypes)"
        out[f"{tag}_prefixes"] = "; ".join(prefixes) or f"not run ({dtype} not in dtypes)"
    any_model = next(iter(numbers.values()))
    any_decode = next(iter(any_model.values()))["decode"]
    out["setup"] = (f"{any_decode['n_prompts']} prompts of {any_decode['prompt_tokens']} tokens, "
                    f"{any_decode['new_tokens']} greedy tokens each")
    agreement = min(r["decode"]["argmax_agreement_pct"] for m in numbers.values() for r in m.values())
    out["argmax_agreement"] = fmt(agreement)
    out["models"] = ", ".join(numbers)
    return out
