"""What chapter 4 shows: decode-step cost (E4, Chart 3), bytes per token (Table 1, Chart 4) and the
approximation table (Table 2, Chart 5), each beside the article's figures, built from results."""
from __future__ import annotations

import pandas as pd

from kvutils.cache.accept_report import threshold_test
from kvutils.cache.registry import ARTICLE_OPS, parse_op
from kvutils.core import compare
from kvutils.core.article import article
from kvutils.core.near_exact import NEAR_EXACT_PCT

# Table 1, for the notebook
from kvutils.report.cache_bytes import bytes_table, plot_bytes  # noqa: F401
from kvutils.report.figures import styled
from kvutils.report.names import human
from kvutils.report.tables import PageTable, page_table, rows_table, tests_table
from kvutils.report.text import fmt
from kvutils.report.weights import weights_note

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
    return rows_table(rows)


@styled
def plot_decode(decode: dict):
    """Chart 3: one decode step with and without the cache, per context length and model (log
    scale), with the memory-bandwidth bound of the cached step."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
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
        ax.text(xi + 0.2, u * 1.1, f"{u / c:.1f}×", ha="center")
    ax.set_yscale("log")
    ax.set_ylim(top=max(uncached) * 3)  # room above the tallest bar for its speed-up label
    ax.set_xticks(x, labels)
    ax.set_ylabel("time of one decode step (ms, log scale)")
    ax.set_xlabel("model and context length")
    ax.set_title(f"What the cache buys: one decode step, median of repeats\nmodels: {', '.join(decode)}")
    fig.tight_layout()
    # off the bars
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=1)
    return fig


# --------------------------------------------------------------------------- Table 2: approximations


def article_rows_by_spec() -> dict[str, dict]:
    """The article's Table 2 rows keyed by our spec of the same operation (ARTICLE_OPS is in the
    article's order)."""
    rows = article()["table2_approximations"]
    return {parse_op(spec).spec: row for spec, row in zip(ARTICLE_OPS, rows)}


def _ops(run: dict | None) -> dict:
    return run["ops"] if run else {}


def blend_fraction(spec: str) -> float:
    """The recomputed fraction of a chunk_blend spec."""
    return float(spec.split("recompute_fraction=")[1].split(",")[0])


def per_doc_kl(r: dict) -> list[float]:
    """One operation's mean KL per document (accept's `per_document`), in the run's document order."""
    return [d["mean_kl"] for d in r["per_document"]]


def sinks_kl(with_sinks: dict, without: dict) -> compare.Paired:
    """A window with its sinks against the same window without them, paired over the documents."""
    return compare.paired(per_doc_kl(with_sinks), per_doc_kl(without), "with sinks", "without")


def blend_tests(table2: dict) -> dict[str, tuple[float, compare.Paired]]:
    """Per model: the smallest partial recompute fraction against none (the reused chunk at
    corrected positions), paired over the documents: (fraction, test)."""
    out = {}
    for model, runs in table2.items():
        ops = _ops(runs["chunks"])
        none = next((r for spec, r in ops.items()
                     if r["name"] == "chunk_reuse" and "positions=reindexed" in spec), None)
        partial = sorted((blend_fraction(spec), spec)
                         for spec, r in ops.items() if r["name"] == "chunk_blend")
        partial = [(f, spec) for f, spec in partial if 0.0 < f < 1.0]
        if none is not None and partial:
            f, spec = partial[0]
            out[model] = (f, compare.paired(per_doc_kl(ops[spec]), per_doc_kl(none),
                                            f"recompute {fmt(100 * f, 3)}%", "none"))
    return out


def line_test(o: dict) -> compare.Paired:
    """An operation's top-1 agreement per document against the near-exact line: the acceptance test's
    and the conclusions' guide's test, at the guide's default `near_exact_pct`."""
    return threshold_test(o["op"], [d["top1_agreement_pct"] for d in o["per_document"]], NEAR_EXACT_PCT)


# Table 2's mark after top-1: ✓ near-exact, ✗ costly, ? not separated (the page's statistics note)
LINE_MARKS = {compare.A_HIGHER: "✓", compare.A_LOWER: "✗"}


def line_mark(o: dict) -> str:
    """The mark of `line_test` (none for the exact cache, or a row scored without documents)."""
    if o.get("family") == "exact" or not o.get("per_document"):
        return ""
    return LINE_MARKS.get(line_test(o).verdict, "?")


def _triple(r: dict) -> str:
    """KL · top-1 with its mark against the near-exact line · perplexity."""
    top1 = f"{r['top1_agreement_pct']:.2f} {line_mark(r)}".rstrip()
    return f"{fmt(r['mean_kl'], 3)} · {top1} · {fmt(r['perplexity'], 4)}"


# Table 2's row of the exact cache at the chunk rows' setting
CHUNK_REFERENCE = "exact (the chunk rows' reference)"


def approximations_table(table2: dict, frontier: dict | None = None) -> pd.DataFrame:
    """Table 2: per operation, mean KL vs the exact cache (nats) · top-1 agreement (%) ·
    perplexity, the article's beside each model's. Chunk rows use the shorter chunk decode, under their
    own exact row (CHUNK_REFERENCE). With `frontier`, its deployed methods join as rows (on its documents,
    "scored on" says); an operation both ran keeps Table 2's numbers."""
    art = article_rows_by_spec()
    rows: dict[str, dict[str, str]] = {}
    for model, runs in table2.items():
        for kind in ("plain", "chunks"):
            run = runs[kind] or {"ops": {}}
            setting = (f"{len(run.get('documents', []))} documents, {run.get('prefill')} + "
                       f"{run.get('decode')} tokens")
            # the chunk rows' own reference, at their decode
            if kind == "chunks" and "exact_perplexity" in run:
                rows.setdefault(CHUNK_REFERENCE, {"scored on": setting}).update({
                    model: f"0 · 100.00 · {fmt(run['exact_perplexity'], 4)}",
                    f"{model}: cache KiB": fmt(run["exact_cache_bytes"] / 1024, 5)})
            for spec, r in _ops(run).items():
                row = rows.setdefault(spec, {"scored on": setting})
                if spec in art and "article (Pythia-160M)" not in row:
                    a = art[spec]
                    ppl = fmt(a["perplexity"], 6) if a["perplexity"] is not None else "n/a"
                    row["article (Pythia-160M)"] = f"{fmt(a['kl'], 6)} · {a['top1_pct']} · {ppl}"
                row.update({model: _triple(r), f"{model}: cache KiB": fmt(r["cache_bytes"] / 1024, 5)})
    table2_specs = set(rows)
    for model, run in (frontier or {}).items():
        for spec, r in run["ops"].items():
            if spec in table2_specs:
                continue
            row = rows.setdefault(spec, {})
            row["scored on"] = f"{len(run['documents'])} documents (the frontier's)"
            row.update({model: _triple(r), f"{model}: cache KiB": fmt(r["cache_bytes"] / 1024, 5)})
    for model, run in (frontier or {}).items():
        for spec, why in run.get("refused", {}).items():
            rows.setdefault(spec, {"scored on": "— (refused by every model)"})[f"{model}"] = f"refused: {why}"
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = f"operation (KL nats · top-1 %, ✓ ✗ ? against {NEAR_EXACT_PCT:g} % · perplexity)"
    return page_table(table, short={spec: human(spec) for spec in rows if ":" in spec or spec == "exact"})


@styled
def plot_approximations(table2: dict):
    """Chart 5: top-1 agreement with the exact cache per operation and model, the article's value
    marked for the operations it ran, and the near-exact line that Table 2's marks test against."""
    import matplotlib.pyplot as plt
    import numpy as np

    art = article_rows_by_spec()
    specs = list(dict.fromkeys(s for runs in table2.values() for kind in ("plain", "chunks")
                               for s in _ops(runs[kind])))
    fig, ax = plt.subplots(figsize=(7.5, 0.3 * len(specs) * max(len(table2), 1) ** 0.5 + 2.2))
    y = np.arange(len(specs))
    height = 0.8 / max(len(table2), 1)
    for i, (model, runs) in enumerate(table2.items()):
        ops = {**_ops(runs["plain"]), **_ops(runs["chunks"])}
        ax.barh(y + i * height, [ops[s]["top1_agreement_pct"] if s in ops else np.nan for s in specs], height,
                label=model)
    marked = [(k, art[s]["top1_pct"]) for k, s in enumerate(specs) if s in art]
    if marked:
        ax.scatter([v for _, v in marked], [k + 0.4 - height / 2 for k, _ in marked], marker="|", s=200,
                   color="black", zorder=3, label="article (Pythia-160M)")
    ax.axvline(NEAR_EXACT_PCT, color="0.3", ls=":", lw=1.2, zorder=4,
               label=f"near-exact line ({NEAR_EXACT_PCT:g} %, tested per document in the table)")
    ax.set_yticks(y + 0.4 - height / 2, [human(s) for s in specs])
    ax.invert_yaxis()
    ax.set_xlim(0, 101)
    ax.set_xlabel("top-1 agreement with the exact cache (%)")
    ax.set_ylabel("cache operation")
    ax.set_title(f"What each cache approximation costs: next-token agreement\nmodels: {', '.join(table2)}")
    fig.tight_layout()
    # below, off the bars
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2)
    return fig


def blend_sweep(table2: dict) -> dict[str, list[tuple[float, float, float]]]:
    """Per model, (recompute fraction, mean KL, top-1 %) from the reused chunk at corrected
    positions (fraction 0) through every chunk_blend setting."""
    out = {}
    for model, runs in table2.items():
        points = []
        for spec, r in _ops(runs["chunks"]).items():
            if r["name"] == "chunk_reuse" and "positions=reindexed" in spec:
                points.append((0.0, r["mean_kl"], r["top1_agreement_pct"]))
            elif r["name"] == "chunk_blend":
                points.append((blend_fraction(spec), r["mean_kl"], r["top1_agreement_pct"]))
        if points:
            out[model] = sorted(points)
    return out


@styled
def plot_blend_sweep(table2: dict):
    """Selective recompute of a reused chunk: how quality returns with the recomputed fraction."""
    import matplotlib.pyplot as plt

    sweep = blend_sweep(table2)
    fig, (ax_kl, ax_top) = plt.subplots(1, 2, figsize=(7.5, 4.2))
    for model, points in sweep.items():
        fractions, kls, tops = zip(*points)
        ax_kl.plot(fractions, [max(k, 1e-6) for k in kls], marker="o", label=model)
        ax_top.plot(fractions, tops, marker="o", label=model)
    ax_kl.set_yscale("log")
    ax_kl.set_ylabel("mean KL vs the exact cache\n(nats, log; 1e-6 = exact)")
    ax_top.set_ylabel("top-1 agreement (%)")
    for ax in (ax_kl, ax_top):
        ax.set_xlabel("fraction of the chunk\nrecomputed in context")
        ax.grid(alpha=0.3)
    ax_top.legend()
    fig.suptitle(f"CacheBlend-style selective recompute of a reused chunk\nmodels: {', '.join(sweep)}")
    fig.tight_layout()
    return fig


def chapter4_glue(numbers: dict) -> dict[str, str]:
    """The two texts of the chapter's Evidence blocks that no table holds: the memory bandwidth and
    Table 2's setup."""
    out = {"bandwidth": fmt(numbers["bandwidth_gb_s"], 3), "setup": "not run"}
    first = next(iter(numbers["table2"].values()), None)
    if first and first["plain"]:
        out["setup"] = (f"{len(first['plain']['documents'])} documents, {first['plain']['prefill']}-token "
                        f"prefill and {first['plain']['decode']} teacher-forced tokens"
                        + (f" ({first['chunks']['decode']} for the chunk rows)" if first["chunks"] else "")
                        + ". " + weights_note(numbers["table2"]))
    return out


def kivi_table(table2: dict) -> PageTable | None:
    """KIVI against naive quantisation at each bit width both ran, with the share of the exact
    cache's bytes each holds: KIVI's full-precision residual makes its cache larger at the same
    bits, so the two compare at their bytes."""
    rows = {}
    for model, runs in table2.items():
        plain = runs["plain"] or {}
        ops = plain.get("ops", {})
        for spec, o in ops.items():
            op = parse_op(spec)
            naive = f"quantize_naive:bits={op.bits}" if op.name == "quantize_kivi" else None
            if naive in ops:
                held = {name: 100 * x["cache_bytes"] / plain["exact_cache_bytes"]
                        for name, x in (("KIVI", o), ("naive", ops[naive]))}
                rows[f"{model}, {op.bits} bits (KIVI's last {op.residual} tokens in full precision)"] = {
                    "KIVI: % of the exact cache's bytes": fmt(held["KIVI"], 3),
                    "KIVI: top-1 (%)": fmt(o["top1_agreement_pct"], 4),
                    "naive: % of the exact cache's bytes": fmt(held["naive"], 3),
                    "naive: top-1 (%)": fmt(ops[naive]["top1_agreement_pct"], 4)}
    return rows_table(rows, "model, bits") if rows else None


def paired_table(numbers: dict) -> PageTable | None:
    """Each window with its sinks against the same window without them, and the smallest partial
    recompute of a reused chunk against none (positions corrected): mean KL, paired over documents."""
    tests = {}
    for model, runs in numbers["table2"].items():
        ops = _ops(runs["plain"])
        for spec, r in ops.items():
            if r["name"] == "window" and "sinks=0" not in spec and "reindex=false" in spec:
                bare = spec.split("sinks=")[0] + "sinks=0," + spec.split("sinks=")[1].split(",", 1)[1]
                if bare in ops:
                    size = spec.split(":")[1].split(",")[0].removeprefix("size=")
                    tests[f"{model}: window of {size}, with sinks against without"] = sinks_kl(r, ops[bare])
    for model, (f, test) in blend_tests(numbers["table2"]).items():
        tests[f"{model}: recompute {fmt(100 * f, 3)} % of a reused chunk against none"] = test
    return tests_table(tests, "comparison (mean KL, nats)") if tests else None


def timing_clause(numbers: dict) -> str:
    """Where and how the decode steps were timed."""
    timing = numbers.get("decode_timing")
    repeats = sorted({len(s.get("speedups") or []) for r in numbers["decode"].values() for s in r["steps"]})
    return ((f"Timed {timing['where']}, on {timing['threads']} torch thread(s) of {timing['cores']} cores."
             if timing else "Timed in this chapter's run (thread count not recorded).")
            + (f" Each time is the median of {'/'.join(str(n) for n in repeats)} repeats, the cached and the "
               "uncached step timed alternately after one warm-up of each; in brackets, the min–max of the "
               "repeats (for a speed-up, of the repeat pairs' own speed-ups)." if repeats and repeats[0] else
               " The repeats of each time were not recorded in this run, so no spread is shown."))
