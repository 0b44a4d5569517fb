"""What chapter 4 shows: decode-step cost (E4, Chart 3), bytes per token (Table 1, Chart 4) and the
approximation table (Table 2, Chart 5), each beside the article's figures, built from results."""
from __future__ import annotations

import pandas as pd

from .report import article, fmt, rows_table


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
            "fp32 cache check (KiB per token): formula → held → measured":
                f"{fmt(r['formula_kib_per_token_fp32'], 4)} → {fmt(r['held_kib_per_token_fp32'], 4)} → "
                f"{fmt(r['measured_kib_per_token'], 4)} at {r['check_tokens']} tokens"
                if r.get("measured_kib_per_token") is not None else "—",
        }
    return rows_table(rows, "configuration")


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


# --------------------------------------------------------------------------- Table 2: approximations


def article_rows_by_spec() -> dict[str, dict]:
    """The article's Table 2 rows keyed by our spec of the same operation (ARTICLE_OPS is in the
    article's order)."""
    from .cache import ARTICLE_OPS, parse_op

    rows = article()["table2_approximations"]
    return {parse_op(spec).spec: row for spec, row in zip(ARTICLE_OPS, rows)}


def _ops(run: dict | None) -> dict:
    return run["ops"] if run else {}


def _triple(r: dict, exact_ppl: float | None = None) -> str:
    return f"{fmt(r['mean_kl'], 3)} · {r['top1_agreement_pct']:.2f} · {fmt(r['perplexity'], 4)}"


def approximations_table(table2: dict) -> pd.DataFrame:
    """Table 2: per operation, mean KL vs the exact cache (nats) · top-1 agreement (%) ·
    perplexity, the article's beside each model's. Chunk rows use the shorter chunk decode."""
    art = article_rows_by_spec()
    rows: dict[str, dict[str, str]] = {}
    for model, runs in table2.items():
        for kind in ("plain", "chunks"):
            for spec, r in _ops(runs[kind]).items():
                row = rows.setdefault(spec, {})
                if spec in art and "article (Pythia-160M)" not in row:
                    a = art[spec]
                    ppl = fmt(a["perplexity"], 6) if a["perplexity"] is not None else "n/a"
                    row["article (Pythia-160M)"] = f"{fmt(a['kl'], 6)} · {a['top1_pct']} · {ppl}"
                row[f"{model}"] = _triple(r)
                row[f"{model}: cache KiB"] = fmt(r["cache_bytes"] / 1024, 5)
    table = pd.DataFrame.from_dict(rows, orient="index").fillna("—")
    table.index.name = "operation (KL nats · top-1 % · perplexity)"
    return table


def plot_approximations(table2: dict):
    """Chart 5: top-1 agreement with the exact cache per operation and model, the article's value
    marked for the operations it ran."""
    import matplotlib.pyplot as plt
    import numpy as np

    art = article_rows_by_spec()
    specs = list(dict.fromkeys(s for runs in table2.values() for kind in ("plain", "chunks") for s in _ops(runs[kind])))
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(specs) + 1.8))
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
    ax.set_yticks(y + 0.4 - height / 2, specs, fontsize=7.5)
    ax.invert_yaxis()
    ax.set_xlim(0, 101)
    ax.set_xlabel("top-1 agreement with the exact cache (%)")
    ax.set_ylabel("cache operation")
    ax.set_title(f"What each cache approximation costs: next-token agreement — models: {', '.join(table2)}",
                 fontsize=10)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
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
                fraction = float(spec.split("recompute_fraction=")[1].split(",")[0])
                points.append((fraction, r["mean_kl"], r["top1_agreement_pct"]))
        if points:
            out[model] = sorted(points)
    return out


def plot_blend_sweep(table2: dict):
    """Selective recompute of a reused chunk: how quality returns with the recomputed fraction."""
    import matplotlib.pyplot as plt

    sweep = blend_sweep(table2)
    fig, (ax_kl, ax_top) = plt.subplots(1, 2, figsize=(10, 4))
    for model, points in sweep.items():
        fractions, kls, tops = zip(*points)
        ax_kl.plot(fractions, [max(k, 1e-6) for k in kls], marker="o", label=model)
        ax_top.plot(fractions, tops, marker="o", label=model)
    ax_kl.set_yscale("log")
    ax_kl.set_ylabel("mean KL vs the exact cache (nats, log; 1e-6 = exact)")
    ax_top.set_ylabel("top-1 agreement (%)")
    for ax in (ax_kl, ax_top):
        ax.set_xlabel("fraction of the chunk's tokens recomputed in context")
        ax.grid(alpha=0.3)
    ax_top.legend(fontsize=8)
    fig.suptitle(f"CacheBlend-style selective recompute of a reused chunk — models: {', '.join(sweep)}", fontsize=10)
    fig.tight_layout()
    return fig


def chapter4_glue(numbers: dict) -> dict[str, str]:
    out = {"bandwidth": fmt(numbers["bandwidth_gb_s"], 3)}
    out["decode"] = "; ".join(
        f"{m}: " + ", ".join(f"{fmt(s['cached_ms'], 3)} ms with and {fmt(s['uncached_ms'], 4)} ms without the cache at "
                             f"{s['context']} tokens ({fmt(s['speedup'], 3)}×; analytical {fmt(s['analytical_ratio'], 4)}×; "
                             f"bandwidth bound {fmt(s['bound_ms'], 3)} ms)" for s in r["steps"])
        for m, r in numbers["decode"].items())
    ours = [r for r in numbers["bytes"] if r["source"] == "ours"]
    out["bytes"] = "; ".join(
        f"{r['model']}: {fmt(r['kib_per_token'], 4)} KiB per token at 16 bits, {fmt(r['gib_per_128k'], 3)} GiB per 128K tokens"
        for r in ours)
    out["bytes_check"] = "; ".join(
        f"{r['model']}: formula {fmt(r['formula_kib_per_token_fp32'], 4)} KiB/token, held by the cache "
        f"{fmt(r['held_kib_per_token_fp32'], 4)}, measured {fmt(r['measured_kib_per_token'], 4)} "
        f"(fp32, {r['check_tokens']} tokens)" for r in ours)
    headline = (("bf16", "cast:dtype=bfloat16"), ("naive int8", "quantize_naive:bits=8"),
                ("naive int4", "quantize_naive:bits=4"), ("KIVI int4", "quantize_kivi:bits=4,group=32,residual=128"),
                ("a 128-token window with 4 sinks", "window:size=128,sinks=4,reindex=false"),
                ("the same window without sinks", "window:size=128,sinks=0,reindex=false"),
                ("a chunk reused at corrected positions", "chunk_reuse:positions=reindexed,chunk=128"),
                ("the chunk at stale positions", "chunk_reuse:positions=original,chunk=128"))
    parts = []
    for model, runs in numbers["table2"].items():
        ops = {**_ops(runs["plain"]), **_ops(runs["chunks"])}
        tops = [f"{label} {ops[spec]['top1_agreement_pct']:.2f}%" for label, spec in headline if spec in ops]
        ppl = f"exact perplexity {fmt(runs['plain']['exact_perplexity'], 4)}; " if runs["plain"] else ""
        parts.append(f"{model}: {ppl}top-1 agreement " + (", ".join(tops) or "for the operations in the table"))
    out["table2"] = "; ".join(parts) or "not run"
    first = next(iter(numbers["table2"].values()), None)
    if first and first["plain"]:
        out["setup"] = (f"{len(first['plain']['documents'])} documents, {first['plain']['prefill']}-token prefill and "
                        f"{first['plain']['decode']} teacher-forced tokens"
                        + (f" ({first['chunks']['decode']} for the chunk rows)" if first["chunks"] else ""))
    else:
        out["setup"] = "not run"
    return out


# --------------------------------------------------------------------------- the frontier


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


def plot_frontier(frontier: dict):
    """Mean KL (log) against the bytes the cache holds, one panel per model, families coloured,
    each press and decode-time policy a line through its budgets."""
    import matplotlib.pyplot as plt

    models = list(frontier)
    fig, axes = plt.subplots(1, max(len(models), 1), figsize=(6.5 * max(len(models), 1), 5.2), squeeze=False)
    colours = {}
    for ax, model in zip(axes[0], models):
        run = frontier[model]
        exact = run["exact_cache_bytes"]
        by_name: dict[str, list] = {}
        for spec, r in run["ops"].items():
            by_name.setdefault(r["name"], []).append((r["cache_bytes"] / exact * 100, max(r["mean_kl"], 1e-7), r["family"], spec))
        for name, points in by_name.items():
            family = points[0][2]
            colour = colours.setdefault(family, f"C{len(colours)}")
            points.sort()
            xs, ys = [p[0] for p in points], [p[1] for p in points]
            marker = "o" if family == "press" else ("s" if family == "decode-time eviction" else "D")
            ax.plot(xs, ys, marker=marker, color=colour, lw=1, ms=5, label=None)
            spec = points[0][3]
            single = name + (f" {spec.split(':')[1].split(',')[0].split('=')[1]}" if ":" in spec else "")
            ax.annotate(name if len(points) > 1 else single, (xs[-1], ys[-1]), fontsize=8, xytext=(3, 3),
                        textcoords="offset points")
        ax.set_yscale("log")
        ax.set_xlabel("cache held after the prefill (% of the exact cache's bytes)")
        ax.set_ylabel("mean KL from the exact cache (nats, log; 1e-7 = exact)")
        n = len(run["documents"])
        ax.set_title(f"{model}: {n} document{'s' * (n != 1)}, {run['prefill']}+{run['decode']} tokens", fontsize=10)
        ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], color=c, marker="o", lw=1, label=f) for f, c in colours.items()]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=9, frameon=False)
    fig.suptitle(f"Bytes against fidelity: every cache method on one frontier — models: {', '.join(models)}", fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 0.95))
    return fig


def frontier_winners(frontier: dict) -> dict[str, dict]:
    """Per model: at each compression ratio the eviction method (press or decode-time policy) with
    the lowest mean KL, and which attention-informed methods beat `random` at each ratio."""
    out = {}
    for model, run in frontier.items():
        per_ratio: dict[float, list] = {}
        for spec, r in run["ops"].items():
            ratio = _ratio(spec)
            if ratio is not None and r["family"] in EVICTION_FAMILIES:
                per_ratio.setdefault(ratio, []).append((r["mean_kl"], r["name"], r["top1_agreement_pct"]))
        winners = {}
        for ratio, entries in sorted(per_ratio.items()):
            kl, name, top1 = min(entries)
            random_kl = next((k for k, n, _ in entries if n == "random"), None)
            beat = sorted(n for k, n, _ in entries if n in ATTENTION_INFORMED and random_kl is not None and k < random_kl)
            lost = sorted(n for k, n, _ in entries if n in ATTENTION_INFORMED and random_kl is not None and k >= random_kl)
            winners[ratio] = {"best": name, "kl": kl, "top1": top1, "random_kl": random_kl, "beat_random": beat,
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
            text = (f"at compression {fmt(ratio)} **{w['best']}** (mean KL {fmt(w['kl'], 3)}, top-1 "
                    f"{w['top1']:.1f}%)")
            if w["not_beating_random"]:
                text += f"; not better than random: {', '.join(w['not_beating_random'])}"
            elif w["random_kl"] is not None:
                text += "; every attention-informed method beats random"
            bits.append(text)
        parts.append(f"{model}: " + "; ".join(bits) if bits else f"{model}: no eviction method in the run")
    return ". ".join(parts) + "."
