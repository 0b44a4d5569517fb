"""What chapter 4 shows: decode-step cost (E4, Chart 3), bytes per token (Table 1, Chart 4) and the
approximation table (Table 2, Chart 5), each beside the article's figures, built from results."""
from __future__ import annotations

import pandas as pd

from kvutils.cache.registry import ARTICLE_OPS, parse_op
from kvutils.core import compare
from kvutils.core.article import article

# Table 1, for the notebook
from kvutils.report.cache_bytes import bytes_glue, bytes_table, plot_bytes  # noqa: F401
from kvutils.report.figures import styled
from kvutils.report.names import human
from kvutils.report.tables import page_table, rows_table
from kvutils.report.text import fmt
from kvutils.report.timing import grew_test, speedup_grew, step_line
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


def _triple(r: dict) -> str:
    return f"{fmt(r['mean_kl'], 3)} · {r['top1_agreement_pct']:.2f} · {fmt(r['perplexity'], 4)}"


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
    table.index.name = "operation (KL nats · top-1 % · perplexity)"
    return page_table(table, short={spec: human(spec) for spec in rows if ":" in spec or spec == "exact"})


@styled
def plot_approximations(table2: dict):
    """Chart 5: top-1 agreement with the exact cache per operation and model, the article's value
    marked for the operations it ran."""
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
    out = {"bandwidth": fmt(numbers["bandwidth_gb_s"], 3)}
    out["decode"] = "; ".join(
        step_line(m, s) + f" (analytical {fmt(s['analytical_ratio'], 4)}×; bandwidth bound "
                          f"{fmt(s['bound_ms'], 3)} ms)"
        for m, r in numbers["decode"].items() for s in r["steps"])
    out.update(bytes_glue(numbers["bytes"]))
    headline = (("bf16", "cast:dtype=bfloat16"), ("naive int8", "quantize_naive:bits=8"),
                ("naive int4", "quantize_naive:bits=4"), ("KIVI int4",
                                                          "quantize_kivi:bits=4,group=32,residual=128"),
                ("a 128-token window with 4 sinks", "window:size=128,sinks=4,reindex=false"),
                ("the same window without sinks", "window:size=128,sinks=0,reindex=false"),
                ("a chunk reused at corrected positions", "chunk_reuse:positions=reindexed,chunk=128"),
                ("the chunk at stale positions", "chunk_reuse:positions=original,chunk=128"))
    parts = []
    for model, runs in numbers["table2"].items():
        ops = {**_ops(runs["plain"]), **_ops(runs["chunks"])}
        tops = [f"{label} {ops[spec]['top1_agreement_pct']:.2f}%" for label, spec in headline if spec in ops]
        ppl = f"exact perplexity {fmt(runs['plain']['exact_perplexity'], 4)}; " if runs["plain"] else ""
        parts.append(f"{model}: {ppl}top-1 agreement "
                     + (", ".join(tops) or "for the operations in the table"))
    out["table2"] = "; ".join(parts) or "not run"
    out["kivi_bytes"] = kivi_bytes(numbers["table2"])
    first = next(iter(numbers["table2"].values()), None)
    if first and first["plain"]:
        out["setup"] = (f"{len(first['plain']['documents'])} documents, {first['plain']['prefill']}-token "
                        f"prefill and {first['plain']['decode']} teacher-forced tokens"
                        + (f" ({first['chunks']['decode']} for the chunk rows)" if first["chunks"] else "")
                        + ". " + weights_note(numbers["table2"]))
    else:
        out["setup"] = "not run"
    return out


def kivi_bytes(table2: dict) -> str:
    """KIVI against naive quantisation at each bit width both ran, with the memory each holds: KIVI's
    full-precision residual makes its cache larger at the same bits, so the two compare at their bytes."""
    parts = []
    for model, runs in table2.items():
        plain = runs["plain"] or {}
        ops = plain.get("ops", {})
        for spec, o in ops.items():
            op = parse_op(spec)
            naive = f"quantize_naive:bits={op.bits}" if op.name == "quantize_kivi" else None
            if naive in ops:
                held = {name: 100 * x["cache_bytes"] / plain["exact_cache_bytes"]
                        for name, x in (("kivi", o), ("naive", ops[naive]))}
                parts.append(f"{model} at {op.bits} bits: KIVI holds {fmt(held['kivi'], 3)} % of the exact "
                             f"cache (its last {op.residual} tokens in full precision) for "
                             f"{fmt(o['top1_agreement_pct'], 4)} % top-1, naive {fmt(held['naive'], 3)} % "
                             f"for {fmt(ops[naive]['top1_agreement_pct'], 4)} %")
    return "; ".join(parts) or "KIVI and naive quantisation did not both run at one bit width"


def _list(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def _grew_tests(decode: dict) -> str:
    """Each model's rank test between consecutive timed contexts."""
    parts = []
    for m, r in decode.items():
        ordered = sorted(r["steps"], key=lambda s: s["context"])
        if all(s.get("speedups") for s in ordered):
            parts += [f"{m}: {grew_test(a, b).clause()}" for a, b in zip(ordered, ordered[1:])]
    return "; ".join(parts) or "no repeats kept"


def chapter4_findings(numbers: dict) -> dict[str, str]:
    """The chapter's measured sentences, each computed from the results (glued as Markdown, numbers
    in bold) by one function per sentence; each says the opposite when the numbers do."""
    return {"timing": timing_clause(numbers), "speed_vs_analytical": speed_vs_analytical(numbers),
            "speed_grows": speed_grows(numbers), "bytes_windowed": bytes_windowed(numbers),
            "sinks": sinks_clause(numbers), "blend": blend_clause(numbers)}


def timing_clause(numbers: dict) -> str:
    """Where and how the decode steps were timed."""
    timing = numbers.get("decode_timing")
    repeats = sorted({len(s.get("speedups") or []) for r in numbers["decode"].values() for s in r["steps"]})
    return ((f"Timed {timing['where']}, on {timing['threads']} torch thread(s) of {timing['cores']} cores."
             if timing else "Timed in this chapter's run (thread count not recorded).")
            + (f" Each time is the median of {'/'.join(str(n) for n in repeats)} repeats, the cached and the "
               "uncached step timed alternately after one warm-up of each, with the min–max of the repeats "
               "beside it; each speed-up is the ratio of the medians, with the range of the repeat pairs' "
               "own speed-ups." if repeats and repeats[0] else
               " The repeats of each time were not recorded in this run, so no spread is shown."))


def speed_vs_analytical(numbers: dict) -> str:
    """The measured speed-up against the analytical compute ratio, and the cached step against its bound."""
    steps = [(m, s) for m, r in numbers["decode"].items() for s in r["steps"]]
    below = [f"{m} at {s['context']} tokens ({fmt(s['speedup'], 3)}× vs {fmt(s['analytical_ratio'], 3)}×)"
             for m, s in steps if s["speedup"] < s["analytical_ratio"]]
    above = [f"{m} at {s['context']} tokens" for m, s in steps if s["speedup"] >= s["analytical_ratio"]]
    bound = [s["cached_ms"] / s["bound_ms"] for _, s in steps]
    return (("The measured speed-up is smaller than the analytical compute ratio " + (
        "everywhere: " if not above else "for ")
             + _list(below) + (
                 "" if not above else f"; it reaches it for {_list(above)}") + ". " if below else
             f"The measured speed-up reaches the analytical compute ratio everywhere ({_list(above)}). ")
            + f"The cached step took {fmt(min(bound), 3)}× to {fmt(max(bound), 3)}× its bandwidth bound "
            "(1× would mean it only streams the weights and the cache once).")


def speed_grows(numbers: dict) -> str:
    """Whether the speed-up grew with context, by the rank test over repeat pairs."""
    grew, not_grew = [], []
    for m, r in numbers["decode"].items():
        ordered = sorted(r["steps"], key=lambda s: s["context"])
        if len(ordered) < 2:
            continue
        speeds = " → ".join(f"{fmt(s['speedup'], 3)}×" + (
            f" [{fmt(min(s['speedups']), 3)}–{fmt(max(s['speedups']), 3)}]" if s.get("speedups") else "")
            for s in ordered)
        (grew if speedup_grew(ordered) else not_grew).append(
            f"{m} ({speeds} from {ordered[0]['context']} to {ordered[-1]['context']} tokens)")
    if not grew and not not_grew:
        return "Only one context was timed, so no trend is measured."
    if not grew:
        text = f"In this run the speed-up did not grow with context on any model: {_list(not_grew)}."
    else:
        text = ("In this run the speed-up grew with context on " + ("every model: " if not not_grew else "")
                + _list(grew) + (f"; it did not on {_list(not_grew)}" if not_grew else "") + ".")
    with_spread = any(s.get("speedups") for r in numbers["decode"].values() for s in r["steps"])
    return text + (" Grew means an exact rank test (Mann–Whitney; the repeat pairs at two contexts are "
                   "not paired) puts the longer context's repeat-pair speed-ups above the shorter's at "
                   f"p < 0.05, at every step ({_grew_tests(numbers['decode'])}; in brackets: the range over "
                   "repeat pairs)." if with_spread else
                   " Grew compares the medians only: this run kept no repeats.")


def bytes_windowed(numbers: dict) -> str:
    """Where sliding-window layers make the cache hold less than the formula."""
    ours = [r for r in numbers["bytes"] if r["source"] == "ours"]
    less = [f"{r['model']} holds "
            f"{fmt(100 * r['held_kib_per_token_fp32'] / r['formula_kib_per_token_fp32'], 3)}% of the "
            f"formula's bytes at {r['check_tokens']} tokens" for r in ours
            if r["held_kib_per_token_fp32"] < r["formula_kib_per_token_fp32"]]
    full = [r["model"] for r in ours if r["held_kib_per_token_fp32"] >= r["formula_kib_per_token_fp32"]]
    return ((f"Where a model has sliding-window layers the cache holds less than the formula says: "
             f"{_list(less)}, because those layers keep only their most recent window" if less else
             "No model of this run holds fewer bytes than the formula")
            + (f"; {_list(full)} hold{'s' * (len(full) == 1)} what the formula says." if full else "."))


def sinks_clause(numbers: dict) -> str:
    """Each window scored with and without sinks: the paired test over documents."""
    pairs = []
    for model, runs in numbers["table2"].items():
        ops = _ops(runs["plain"])
        for spec, r in ops.items():
            if r["name"] == "window" and "sinks=0" not in spec and "reindex=false" in spec:
                bare = spec.split("sinks=")[0] + "sinks=0," + spec.split("sinks=")[1].split(",", 1)[1]
                if bare in ops:
                    pairs.append((model, spec, r, ops[bare]))
    sink_tests = [(m, spec, sinks_kl(a, b)) for m, spec, a, b in pairs]
    return ("; ".join(f"{m}, {spec.split(':')[1].split(',')[0]}: {t.sentence(metric='mean KL (nats)')}"
                      for m, spec, t in sink_tests) + "." if pairs
            else "No window was scored both with and without sinks in this run.")


def blend_clause(numbers: dict) -> str:
    """A partial recompute of a reused chunk against none, paired over documents."""
    blend = [(m, *t) for m, t in blend_tests(numbers["table2"]).items()]
    return ("; ".join(
        f"{m}: recomputing {fmt(100 * f, 3)}% of the chunk against none (positions corrected): "
        f"{t.sentence(metric='mean KL (nats)')}" for m, f, t in blend) + ".") if blend \
        else "No partial recompute was scored in this run."

