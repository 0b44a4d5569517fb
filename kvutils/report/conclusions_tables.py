"""The conclusions page's four tables: each of the article's research questions, the article's
figure beside ours for every model that ran (RQ4 is ours alone: the LoRA switch). The reasons where
they differ are in kvutils.report.conclusions."""
from __future__ import annotations

import math

import pandas as pd

from kvutils.core.article import article
from kvutils.report.cache_approximations import article_rows_by_spec
from kvutils.report.cache_exactness import recompute_label, recompute_mode
from kvutils.report.guide import ARTICLE_MODEL, chapter4_ops, chapter_numbers, stale_test, stale_word
from kvutils.report.guide_retrieval import retrieval_summary
from kvutils.report.sense_probes import first_stays_at, peak_depths
from kvutils.report.tables import rows_table
from kvutils.report.text import fmt, fraction
from kvutils.report.timing import speedup_text


def causal_models(numbers: dict) -> dict:
    return {m: r for m, r in numbers.items() if r.get("family", "causal") == "causal"}


def encoder_models(numbers: dict) -> dict:
    return {m: r for m, r in numbers.items() if r.get("family") == "encoder"}


def rq1_table(runs: dict) -> pd.DataFrame:
    """RQ1: is the cache an exact substitute for recomputation; how does an encoder differ?"""
    a = article()
    e1, e2, bert = a["e1_decode"], a["e2_prefix"], a["e2_bert"]
    per_step = recompute_mode({"recompute": "per_step"})
    art64, art32 = e1["fp64"]["pythia-160m"], e1["fp32"]["pythia-160m"]
    rows = {
        "fp64: identical greedy sequences, cache vs recompute": {
            f"article ({ARTICLE_MODEL})": f"{fraction(art64['identical'], art64['n'])} ({per_step})"},
        "fp64: largest |logit difference|": {
            f"article ({ARTICLE_MODEL})":
                f"{fmt(art64['max_logit_diff'])} ({per_step}, {art64['n']} prompts)"},
        "fp32: largest |logit difference|": {
            f"article ({ARTICLE_MODEL})":
                f"{fmt(art32['max_logit_diff'])} ({per_step}, {art32['n']} prompts)"},
        "fp32: median logit std (the scale rounding acts on)": {
            f"article ({ARTICLE_MODEL})": fmt(e1["fp32"]["pythia-160m"]["median_logit_std"])},
        "prefixes whose K/V are bit-identical under both continuations (fp32)": {
            f"article ({ARTICLE_MODEL})": fraction(e2["fp32"]["bit_identical"], e2["n_prefixes"])},
        "fp64: largest K/V difference of a prefix across continuations (rounding)": {
            f"article ({ARTICLE_MODEL})": fmt(e2["fp64"]["residue"])},
        "same word, two contexts: cosine distance of the state, last layer": {
            f"article ({ARTICLE_MODEL})": f"{fmt(bert['cosine_distance']['layer_12'])} (BERT-base, encoder)"},
    }
    for model, by_dtype in chapter_numbers(runs, "01").items():
        col = f"ours: {model}"
        for dtype, tag in (("float64", "fp64"), ("float32", "fp32")):
            if dtype in by_dtype:
                d = by_dtype[dtype]["decode"]
                rows[f"{tag}: largest |logit difference|"][col] = "; ".join(
                    f"{fmt(x['max_logit_diff'])} ({recompute_label(x)})" for x in
                    (by_dtype[dtype][k] for k in ("decode", "decode_per_step") if k in by_dtype[dtype]))
                if tag == "fp64":
                    rows["fp64: identical greedy sequences, cache vs recompute"][col] = (
                        f"{fraction(d['identical'], d['n_prompts'])} ({recompute_mode(d)})")
                    rows["fp64: largest K/V difference of a prefix across continuations (rounding)"][col] = (
                        f"{fmt(by_dtype[dtype]['prefixes']['max_diff_across_continuations'])} "
                        f"(n = {by_dtype[dtype]['prefixes']['n_prefixes']} prefixes)")
                else:
                    rows["fp32: median logit std (the scale rounding acts on)"][col] = (
                        f"{fmt(d['median_logit_std'], 4)} (n = {d['n_prompts']} prompts)")
                    x = by_dtype[dtype]["prefixes"]
                    rows["prefixes whose K/V are bit-identical under both continuations (fp32)"][col] = (
                        fraction(x["bit_identical"], x["n_prefixes"]))
    for model, r in chapter_numbers(runs, "02").items():
        kind = "encoder" if r["family"] == "encoder" else "causal"
        rows["same word, two contexts: cosine distance of the state, last layer"][f"ours: {model}"] = (
            f"{fmt(r['cosine_distance_mean'][-1])} ({kind}; mean of n = {r.get('n_words', '?')} words)")
    return rows_table(rows, "finding")


def rq2_table(runs: dict) -> pd.DataFrame:
    """RQ2: where is an earlier word re-interpreted, if its cached state never changes?"""
    a = article()
    probe, attention = a["e3_probe"]["pythia"], a["e3_attention"]
    rows = {
        "sense probe at the old (cached) position": {
            f"article ({ARTICLE_MODEL})": f"{fmt(probe['old_position_acc_pct_all_depths'])}% at all "
                                          f"{probe['n_depths']} depths"},
        "sense probe at a new position: peak % [depths]": {
            f"article ({ARTICLE_MODEL})": f"{fmt(probe['new_position_peak_acc_pct'])} "
                                          f"{probe['new_position_peak_layers']}"},
        "attention from the new position on the disambiguating text": {
            f"article ({ARTICLE_MODEL})":
                f"{fmt(attention['to_continuation_min'])}–{fmt(attention['to_continuation_max'])}"},
        "encoder: sense probe at the original position": {
            f"article ({ARTICLE_MODEL})":
                f"{fmt(a['e3_probe']['bert']['old_position_acc_pct_from_layer_1'])}% from layer 1 "
                "(BERT-base)"},
    }
    numbers = chapter_numbers(runs, "03")
    for model, r in causal_models(numbers).items():
        col = f"ours: {model}"
        old, new = r["probe"]["old_position_pct"], r["probe"]["new_position_pct"]
        n = f"n = {r['probe']['n_items']} items"
        rows["sense probe at the old (cached) position"][col] = (
            f"{fmt(old[0])}% at all {len(old)} depths ({n})" if len(set(old)) == 1 else
            f"{fmt(min(old))}–{fmt(max(old))}% ({n})")
        best, where = peak_depths(new)
        rows["sense probe at a new position: peak % [depths]"][col] = f"{fmt(best)} {where} ({n})"
        cont = r["attention"]["continuation"]
        rows["attention from the new position on the disambiguating text"][col] = (
            f"{fmt(min(cont), 3)}–{fmt(max(cont), 3)} (range over layers; mean over heads and {n})")
    for model, r in encoder_models(numbers).items():
        old = r["probe"]["old_position_pct"]
        full = first_stays_at(old, 100.0)
        rows["encoder: sense probe at the original position"][f"ours: {model}"] = (
            (f"100% from depth {full}" if full is not None else f"peak {fmt(max(old))}%")
            + f" (n = {r['probe']['n_items']} items)")
    return rows_table(rows, "finding")


# (our spec, the label the conclusions use): the article's headline rows for RQ3
RQ3_OPS = (("cast:dtype=bfloat16", "bf16 cache"), ("quantize_naive:bits=4", "int4 cache, per token and head"),
           ("window:size=128,sinks=4,reindex=false", "window of 128 with 4 sink tokens"),
           ("window:size=128,sinks=0,reindex=false", "window of 128, no sinks"),
           ("chunk_reuse:positions=reindexed,chunk=128", "chunk cached alone, positions corrected"),
           ("chunk_reuse:positions=original,chunk=128", "chunk cached alone, stale positions"))


def longest_steps(ch4: dict) -> dict[str, dict]:
    """Per model, chapter 4's decode-step timing at its longest context."""
    return {m: max(d["steps"], key=lambda s: s["context"]) for m, d in ch4["decode"].items()}


def rq3_table(runs: dict) -> pd.DataFrame:
    """RQ3: which cache operations break exactness, by how much, against what the exact cache buys."""
    art = article_rows_by_spec()
    e4 = article()["e4_decode_time"]
    numbers = chapter_numbers(runs, "04")
    rows = {f"top-1 agreement (%): {label}": {f"article ({ARTICLE_MODEL})": fmt(art[spec]["top1_pct"])}
            for spec, label in RQ3_OPS}
    speed = "exact cache: decode-step speed-up at the longest context"
    rows[speed] = {f"article ({ARTICLE_MODEL})": f"{fmt(e4['ctx_2000']['speedup'])}× at 2000 tokens"}
    for model, run in numbers["table2"].items():
        ops = chapter4_ops(run)
        for spec, label in RQ3_OPS:
            if spec in ops:
                rows[f"top-1 agreement (%): {label}"][f"ours: {model}"] = (
                    f"{fmt(ops[spec]['top1_agreement_pct'], 4)} (n = {len(ops[spec]['per_document'])} "
                    "documents)")
    for model, longest in longest_steps(numbers).items():
        rows[speed][f"ours: {model}"] = f"{speedup_text(longest)} at {longest['context']} tokens"
    for model in numbers.get("retrieval") or {}:  # the second axis: does the model still find a key far back?
        rows.setdefault("long-range retrieval (chapter 4)", {f"article ({ARTICLE_MODEL})": "not measured"})[
            f"ours: {model}"] = retrieval_summary(numbers["retrieval"], model)
    return rows_table(rows, "finding")


def stale_against_tail(r: dict, k: int) -> str:
    """Chapter 5's own paired test on its held-out examples: stale reuse against the tail patch at k."""
    held = r["switch"]["heldout"][f"tail{k}"]
    a, b = held["stale"], held["tail_patch"]
    p = stale_test(r, k)
    low, high = (100 * x for x in p.ci95) if p.ci95 is not None else (math.nan, math.nan)
    return (f"{fmt(a['accuracy_pct'], 3)}% vs {fmt(b['accuracy_pct'], 3)}% (k = {k}, n = {p.n}; difference "
            f"{fmt(100 * p.effect, 3)} points [{fmt(low, 3)}, {fmt(high, 3)}], p = {p.p:.2g}): "
            f"{stale_word(p)}")


def rq4_table(runs: dict) -> pd.DataFrame:
    """Beyond the article: what stays exact when a LoRA adapter on the last k layers takes over."""
    stale_acc = "stale cache against the tail patch: held-out accuracy, largest k (paired)"
    rows: dict[str, dict[str, str]] = {"tail patch vs full recompute: largest |logit difference|": {},
                                       "stale cache: top-1 agreement with the recompute (%), largest k": {},
                                       stale_acc: {},
                                       "tail patch time ÷ full recompute time, per k": {}}
    for model, r in chapter_numbers(runs, "05").items():
        col = f"ours: {model}"
        scores, per_k = r["switch"]["scores"], r["cost"]["per_k"]
        n_exact = scores[f"tail{min(r['k_values'])}"]["tail_patch"]["n"]
        rows["tail patch vs full recompute: largest |logit difference|"][col] = (
            fmt(max(scores[f"tail{k}"]["tail_patch"]["max_abs_logit_diff"] for k in r["k_values"]))
            + f" (n = {n_exact} examples per k)")
        k_max = max(r["k_values"])
        stale = scores[f"tail{k_max}"]["stale"]
        rows["stale cache: top-1 agreement with the recompute (%), largest k"][col] = (
            f"{fmt(stale['top1_agree_pct'], 4)} (k = {k_max}, n = {stale['n']} examples)")
        rows[stale_acc][col] = stale_against_tail(r, k_max)
        rows["tail patch time ÷ full recompute time, per k"][col] = ", ".join(
            f"k={k}: {fmt(per_k[str(k)]['tail_time_fraction'], 3)}" for k in r["k_values"]) + (
            f" (median of n = {len(per_k[str(r['k_values'][0])]['tail_patch'].get('seconds_repeats') or [])} "
            "repeats)")
    return rows_table(rows, "finding")
