"""What chapter 1 shows: the article's E1/E2 figures beside ours (Table 1 of the page), the per-step
and per-layer figure, and the texts the prose glues in, all built from the results dict of
`kvutils.studies.cache_exactness`."""
from __future__ import annotations

import math

import pandas as pd

from kvutils.core.article import article
from kvutils.report.figures import styled
from kvutils.report.findings import Finding, PageFindings, Section, Test, captioned
from kvutils.report.tables import PageTable, page_table, rows_table
from kvutils.report.text import fmt, fraction
from kvutils.report.weights import weights_note


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
                        (f"argmax agreement (%), steps before divergence [{mode}]",
                         fmt(d["argmax_agreement_pct"])),
                        (f"argmax agreement (%), every generated step [{mode}]",
                         fmt(d["argmax_agreement_all_steps_pct"]))):
                    if metric.startswith("argmax"):  # over both dtypes: the lower one
                        value = min(rows.get(metric, {}).get(column, value), value, key=float)
                    rows.setdefault(metric, {})[column] = value
            x = r["prefixes"]
            for metric, value in ((f"{p}: median logit std", fmt(r["decode"]["median_logit_std"])),
                                  (f"{p}: prefixes with bit-identical K/V", fraction(x["bit_identical"],
                                                                                     x["n_prefixes"])),
                                  (f"{p}: residue across continuations",
                                   fmt(x["max_diff_across_continuations"])),
                                  (f"{p}: max key diff, alone vs inside",
                                   fmt(x["max_key_diff_alone_vs_inside"]))):
                rows.setdefault(metric, {})[column] = value
    for metric, value in _article_column().items():
        rows.setdefault(metric, {})["article (Pythia)"] = value
    table = pd.DataFrame.from_dict(rows, orient="index")
    table["article (Pythia)"] = table["article (Pythia)"].fillna("—")  # the article ran per step only
    table = table[["article (Pythia)"] + [c for c in table.columns if c != "article (Pythia)"]].fillna(
        "not run")
    table.index.name = "metric"
    return page_table(table.sort_index(key=lambda idx: [_row_order(m) for m in idx]))


def _article_column() -> dict[str, str]:
    """Chapter 1's table: the article's figures, metric by metric (its decoding is all per step)."""
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
        "fp32: median logit std": ", ".join(f"{fmt(v['median_logit_std'])} ({m})"
                                            for m, v in e1["fp32"].items()),
        "fp32: prefixes with bit-identical K/V": fraction(e2["fp32"]["bit_identical"], e2["n_prefixes"]),
        "fp64: prefixes with bit-identical K/V": fraction(e2["fp64"]["bit_identical"], e2["n_prefixes"]),
        "fp64: residue across continuations": fmt(e2["fp64"]["residue"]),
        "fp32: max key diff, alone vs inside": fmt(e2["fp32"]["alone_vs_inside_max_key_diff"]),
        "fp64: max key diff, alone vs inside": fmt(e2["fp64"]["alone_vs_inside_max_key_diff"]),
    }
    return {**art_decode, **art_rest}


def _row_order(metric: str) -> tuple:
    """Decoding rows first (fp32, fp64, argmax), one-pass before per-step, then the prefix rows."""
    prefix_rows = ("prefixes with", "residue", "key diff", "median logit std")
    group = 1 if any(t in metric for t in prefix_rows) else 0
    return (group, not metric.startswith("prompts"), "argmax" in metric, metric.split(" [")[0],
            "per step" in metric)


@styled
def plot_chapter1(numbers: dict):
    """Top: per generated step, the largest |logit difference| between cached and no-cache decoding,
    one line per model, dtype and no-cache procedure (the legend names it). Bottom: per layer, max
    |Δkey| between a prefix computed alone and inside a longer sequence (depth normalised so models
    of different depth share an axis)."""
    import matplotlib.pyplot as plt

    floor = 1e-18  # an exactly equal value (0) has no place on a log axis: drawn at the floor
    fig, (ax_dec, ax) = plt.subplots(2, 1, figsize=(7.5, 11), height_ratios=(1.3, 1))
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
        a.text(0.01, 1.6e-18, "exactly equal (0)", fontsize=9, color="grey",
               transform=a.get_yaxis_transform())
    ax_dec.set_xlabel("generated step")
    ax_dec.set_ylabel("max |logit diff| (logit units, log)")
    ax_dec.set_title("Decoding: cache vs no cache, per step (up to the first divergence)")
    ax_dec.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15))  # below the axes, clear of every line
    ax.set_xlabel("layer depth (layer index / number of layers)")
    ax.set_ylabel("max |Δ key|, alone vs inside (log)")
    ax.set_title("Prefix keys alone vs inside a longer sequence, per layer")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    fig.suptitle(f"Chapter 1 — models: {', '.join(numbers)}")
    fig.tight_layout()
    return fig


def setup_text(numbers: dict) -> str:
    """The run's prompts, the no-cache procedure and the weights, as the Evidence block says them."""
    d = next(iter(next(iter(numbers.values())).values()))["decode"]
    return (f"Setup: {d['n_prompts']} prompts of {d['prompt_tokens']} tokens, {d['new_tokens']} greedy "
            f"tokens each; no-cache side: {recompute_label(d)}. {weights_note(numbers)}.")


def per_step_table(numbers: dict) -> PageTable | None:
    """The article's per-step procedure on the first prompts, beside one pass on the same prompts:
    whether both procedures found the same divergences, and what the per-step one cost per prompt
    (one timing of each procedure per model and precision, not repeats)."""
    rows = {}
    for model, by_dtype in numbers.items():
        for dtype, r in by_dtype.items():
            if "decode_per_step" in r:
                ps, main = r["decode_per_step"], r["decode"]
                k = ps["n_prompts"]
                same = ps["first_divergence"] == main["first_divergence"][:k]
                rows[f"{model}, {dtype}"] = {
                    "prompts": str(k), "identical sequences": fraction(ps["identical"], k),
                    "max |logit diff|": fmt(ps["max_logit_diff"]),
                    "the same divergences as one pass": "yes" if same else "no",
                    "time per prompt ÷ one pass":
                        fmt(ps["seconds_per_prompt"] / main["seconds_per_prompt"], 3)}
    return rows_table(rows, "model, precision") if rows else None


def prefix_table(numbers: dict) -> PageTable:
    """Per model and precision: prefixes whose K/V are bit-identical under two continuations, the
    largest difference otherwise, and a prefix's keys alone against inside a longer text (the largest
    difference, and how many prefixes were exactly equal)."""
    rows = {}
    for model, by_dtype in numbers.items():
        for dtype, r in by_dtype.items():
            x = r["prefixes"]
            zeros = sum(i["max_key_diff_alone_vs_inside"] == 0 for i in x["items"])
            rows[f"{model}, {dtype}"] = {
                "bit-identical under two continuations": fraction(x["bit_identical"], x["n_prefixes"]),
                "largest difference across continuations": fmt(x["max_diff_across_continuations"]),
                "largest key difference alone vs inside": fmt(x["max_key_diff_alone_vs_inside"]),
                "alone = inside exactly": fraction(zeros, len(x["items"]))}
    return rows_table(rows, "model, precision")


def shrink_table(numbers: dict) -> PageTable | None:
    """Per model run in both precisions: the largest alone-vs-inside key difference in fp32 and fp64,
    and the orders of magnitude between them."""
    rows = {}
    for model, by_dtype in numbers.items():
        if {"float32", "float64"} <= set(by_dtype):
            a = by_dtype["float32"]["prefixes"]["max_key_diff_alone_vs_inside"]
            b = by_dtype["float64"]["prefixes"]["max_key_diff_alone_vs_inside"]
            orders = "none (did not shrink)" if a > 0 else "none (exactly 0 already in fp32)"
            if 0 < b < a:
                orders = fmt(math.log10(a / b), 2)
            elif b == 0 < a:
                orders = "to exactly 0"
            rows[model] = {"fp32": fmt(a, 3), "fp64": fmt(b, 3), "orders of magnitude": orders}
    return rows_table(rows, "model (largest key difference alone vs inside)") if rows else None


# fp64: a logit difference at most this is rounding of a theorem's identity (DESIGN: within 1e-9)
EXACT = 1e-9
DECODE_TEST = "exact match"
PREFIX_TEST = "bit identity"


def _decodes(numbers: dict, dtype: str) -> list[dict]:
    return [by[dtype]["decode"] for by in numbers.values() if dtype in by]


def _prefixes(numbers: dict, dtype: str) -> list[dict]:
    return [by[dtype]["prefixes"] for by in numbers.values() if dtype in by]


def _decode_finding(numbers: dict, dtype: str, tag: str, yes: str, no: str) -> Finding:
    runs = _decodes(numbers, dtype)
    same, n = sum(d["identical"] for d in runs), sum(d["n_prompts"] for d in runs)
    largest = max(d["max_logit_diff"] for d in runs)
    exact = same == n and (dtype != "float64" or largest <= EXACT)
    return Finding(f"{tag}_decode", yes if exact else no,
                   f"In {tag}, {{same}} of {{n}} sequences matched recomputation; largest logit difference "
                   "{largest}.",
                   (("same", same), ("n", n), ("largest", largest)), Test(DECODE_TEST, n, "sequences"))


def chapter1_findings(numbers: dict) -> PageFindings:
    """Chapter 1's answer, box and section points (`kvutils.report.findings`), from the results."""
    pythia = article()["e1_decode"]["fp32"]["pythia-160m"]
    dtypes = [d for d in ("float64", "float32") if _decodes(numbers, d)]
    decode = {d: _decode_finding(numbers, d, "fp64" if d == "float64" else "fp32",
                                 "The cache is exact." if d == "float64" else "fp32 leaves rounding only.",
                                 f"The cache diverged in {d}.") for d in dtypes}
    every = [d for by in numbers.values() for r in by.values() for d in _decode_runs(r)]
    argmax = Finding("argmax", "Greedy choices agree.",
                     "The argmax agreed on {before} % of steps before any divergence and {every} % of all "
                     "steps.",
                     (("before", min(d["argmax_agreement_pct"] for d in every)),
                      ("every", min(d["argmax_agreement_all_steps_pct"] for d in every))),
                     Test("greedy steps compared", sum(d["steps_compared"] for d in every), "steps"))
    fp32_versus = Finding("fp32_article", "Our fp32 residue is below the article's.",
                          "Largest fp32 logit difference {ours}, against {pythia} on Pythia-160M.",
                          (("ours", max((d["max_logit_diff"] for d in _decodes(numbers, "float32")),
                                        default=None)),
                           ("pythia", pythia["max_logit_diff"])))
    prefix = _prefix_finding(numbers, dtypes[0])
    shrink = _shrink_finding(numbers)
    exact = decode.get("float64", decode[dtypes[0]])
    answer = Finding("answer", "Yes." if exact.claim == "The cache is exact." else "Not in this run.",
                     "Cached decoding reproduced recomputation, and what differs in fp32 is rounding that "
                     "fp64 removes."
                     if exact.claim == "The cache is exact." else
                     "Cached decoding did not reproduce recomputation on every prompt; see the evidence "
                     "below.")
    box = tuple(f for f in (decode.get("float64"), decode.get("float32"), prefix, shrink) if f is not None)
    per_step = captioned(("The article's per-step procedure on the first prompts, beside one pass",
                           per_step_table(numbers)))
    shrinking = captioned(("From fp32 to fp64", shrink_table(numbers)))
    return PageFindings(answer, box, {
        "decoding": Section(exact, (*(f for f in decode.values() if f is not exact), argmax, fp32_versus),
                            (setup_text(numbers),), per_step),
        "prefixes": Section(prefix, (), (), (("Every model and precision", prefix_table(numbers)),)),
        "residue": Section(shrink or prefix, (), (), shrinking),
    })



def _prefix_finding(numbers: dict, dtype: str) -> Finding:
    runs = _prefixes(numbers, dtype)
    same, n = sum(x["bit_identical"] for x in runs), sum(x["n_prefixes"] for x in runs)
    largest = max(x["max_diff_across_continuations"] for x in runs)
    tag = "fp64" if dtype == "float64" else "fp32"
    return Finding("prefixes",
                   "A prefix's cache ignores what follows." if largest <= EXACT or dtype == "float32"
                   else "A prefix's cache moved with what follows.",
                   f"In {tag}, {{same}} of {{n}} prefixes were bit-identical under two continuations; "
                   "the rest differed by at most {largest}.",
                   (("same", same), ("n", n), ("largest", largest)), Test(PREFIX_TEST, n, "prefixes"))


def _shrink_finding(numbers: dict) -> Finding | None:
    """The alone-vs-inside key residue from fp32 to fp64, over every model run in both."""
    both = [by for by in numbers.values() if {"float32", "float64"} <= set(by)]
    if not both:
        return None
    fp32 = max(by["float32"]["prefixes"]["max_key_diff_alone_vs_inside"] for by in both)
    fp64 = max(by["float64"]["prefixes"]["max_key_diff_alone_vs_inside"] for by in both)
    claim = "The fp32 residue is rounding." if fp64 < fp32 else "The fp32 residue did not shrink."
    moved = ("A prefix's keys, computed alone and inside a longer text, differ by at most {fp32} in fp32 and "
             "{fp64} in fp64")
    if 0 < fp64 < fp32:
        return Finding("residue", claim, moved + ": {orders} orders of magnitude less.",
                       (("fp32", fp32), ("fp64", fp64), ("orders", math.log10(fp32 / fp64))))
    return Finding("residue", claim, moved + ".", (("fp32", fp32), ("fp64", fp64)))
