"""Benchmark: ratios measured side by side in one run (never timed tests — these machines are noisy).

What it measures and writes to results/bench.json is kvutils.studies.bench_args' description (its
`--help`); the arguments are checked there, before this module and torch are imported.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kvutils.cache.costs import memory_bandwidth, repeat_seconds
from kvutils.core import results
from kvutils.models import loading as models
from kvutils.models.greedy import greedy, recompute_logits
from kvutils.models.registry import EMBEDDED
from kvutils.studies import bench_args

# sizes: (decode prompt, decode new tokens, teacher prefill, teacher decode, long context, switch tokens)
SIZES = {"full": (32, 64, 256, 64, 2000, 256), "quick": (8, 8, 32, 16, 128, 32)}


def bench_load(name: str) -> dict:
    """Time the first load (conversion into an empty cache) against a load from that cache. A tiny
    model converts nothing (both loads are seeded initialisations), so it is timed in place."""
    converts = name in EMBEDDED
    previous = os.environ.get("KVUTILS_CACHE")
    with tempfile.TemporaryDirectory() as fresh:
        if converts:
            os.environ["KVUTILS_CACHE"] = fresh
        try:
            start = time.perf_counter()
            models.load(name)
            first = time.perf_counter() - start
            start = time.perf_counter()
            models.load(name)
            cached = time.perf_counter() - start
        finally:
            if previous is None:
                os.environ.pop("KVUTILS_CACHE", None)
            else:
                os.environ["KVUTILS_CACHE"] = previous
    return {"first_load_s": first, "cached_load_s": cached, "speedup": first / cached, "converts": converts}


@torch.inference_mode()
def bench_decode(loaded: models.Loaded, prompt_tokens: int, new_tokens: int, repeats: int) -> dict:
    """Per-token time of kvutils.greedy(use_cache=True) vs transformers' generate on one prompt."""
    ids = torch.arange(1000, 1000 + prompt_tokens)[None]
    ours = repeat_seconds(lambda: greedy(loaded, ids, new_tokens, use_cache=True), repeats)
    theirs = repeat_seconds(lambda: loaded.model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        do_sample=False, use_cache=True, pad_token_id=0), repeats)
    per_token = [[1e3 * t / new_tokens for t in times] for times in (ours, theirs)]
    return {"prompt_tokens": prompt_tokens, "new_tokens": new_tokens, "repeats": repeats,
            "kvutils_ms_per_token": statistics.median(per_token[0]),
            "generate_ms_per_token": statistics.median(per_token[1]),
            "kvutils_ms_per_token_repeats": per_token[0], "generate_ms_per_token_repeats": per_token[1],
            "ratio_kvutils_over_generate": statistics.median(ours) / statistics.median(theirs)}


@torch.inference_mode()
def bench_recompute(loaded: models.Loaded, prompt_tokens: int, new_tokens: int, repeats: int) -> dict:
    """Chapter 1's no-cache side: one forward over the final text vs regeneration at every step."""
    ids = torch.arange(1000, 1000 + prompt_tokens)[None]
    tokens, _ = greedy(loaded, ids, new_tokens, use_cache=True)
    sequence = torch.cat([ids, tokens], -1)
    one_pass = repeat_seconds(lambda: recompute_logits(loaded, sequence, prompt_tokens), repeats)
    per_step = repeat_seconds(lambda: greedy(loaded, ids, new_tokens, use_cache=False), max(1, repeats // 2))
    return {"one_pass_s": statistics.median(one_pass), "per_step_s": statistics.median(per_step),
            "one_pass_repeats_s": one_pass, "per_step_repeats_s": per_step,
            "speedup": statistics.median(per_step) / statistics.median(one_pass)}


TEACHER_OPS = {"teacher": ("window:size=128,sinks=4", "float32"), "teacher_fp64": ("quantize_naive:bits=4",
                                                                                   "float64"),
               "teacher_fp32_discrete": ("quantize_naive:bits=4", "float32"),
               "teacher_press": ("snapkv:compression_ratio=0.5,window=32", "float32")}
# the quick profile's sizes: the window must evict within its few tokens, SnapKV's observation
# window must fit in its prefill
QUICK_SPECS = {"window:size=128,sinks=4": "window:size=16,sinks=4",
               "snapkv:compression_ratio=0.5,window=32": "snapkv:compression_ratio=0.5,window=8"}
DECODE_POLICY = "tova:compression_ratio=0.5"


def bench_teacher(loaded: models.Loaded, prefill: int, decode: int,
                  op: str = "window:size=128,sinks=4") -> dict:
    """Chapter 4's scoring of one cache operation on one real document: the fast path (one forward
    with a 4-D mask) against the step-by-step reference path, and how far apart their logits are."""
    from kvutils.cache.accept import tokenize_documents
    from kvutils.cache.fast_path import score_fast
    from kvutils.cache.prefilled import exact_prefill
    from kvutils.cache.registry import parse_op
    from kvutils.cache.scoring import score_step
    from kvutils.core import data

    used, _ = tokenize_documents(loaded.tokenizer, data.load_corpus(), prefill + decode + 1, 1)
    doc, ids = used[0]
    cache_op = parse_op(op)
    # shared, outside the timing
    exact_kv = exact_prefill(loaded, ids[None, :prefill], views=cache_op.needs_views)
    start = time.perf_counter()
    fast = score_fast(loaded, cache_op, ids, prefill, decode, exact_kv)
    fast_s = time.perf_counter() - start
    start = time.perf_counter()
    step = score_step(loaded, cache_op, ids, prefill, decode, exact_kv)
    step_s = time.perf_counter() - start
    return {"op": cache_op.spec, "dtype": str(loaded.dtype).removeprefix("torch."), "document": doc.id,
            "prefill": prefill, "decode": decode, "fast_s": fast_s,
            "step_s": step_s, "speedup": step_s / fast_s, "max_logit_diff": (fast - step).abs().max().item()}


def bench_decode_policy(loaded: models.Loaded, prefill: int, decode: int, op: str = DECODE_POLICY) -> dict:
    """What scoring a decode-time policy costs: it evicts after every token, so it has only the
    step path. Its time beside the exact cache's on the fast path (how every prefill-time method
    is scored) and on the step path (the same path without the policy's decisions)."""
    from kvutils.cache.accept import tokenize_documents
    from kvutils.cache.fast_path import score_fast
    from kvutils.cache.methods.exact import Exact
    from kvutils.cache.prefilled import exact_prefill
    from kvutils.cache.registry import parse_op
    from kvutils.cache.scoring import score_step
    from kvutils.core import data

    used, _ = tokenize_documents(loaded.tokenizer, data.load_corpus(), prefill + decode + 1, 1)
    doc, ids = used[0]
    policy = parse_op(op)
    pre = exact_prefill(loaded, ids[None, :prefill], views=policy.needs_views)  # shared, outside the timing
    times = {}
    for key, (score, cache_op) in {"policy_step_s": (score_step, policy), "exact_fast_s": (score_fast,
                                                                                           Exact()),
                                   "exact_step_s": (score_step, Exact())}.items():
        start = time.perf_counter()
        score(loaded, cache_op, ids, prefill, decode, pre)
        times[key] = time.perf_counter() - start
    return {"op": policy.spec, "document": doc.id, "prefill": prefill, "decode": decode, **times,
            "over_exact_fast": times["policy_step_s"] / times["exact_fast_s"],
            "over_exact_step": times["policy_step_s"] / times["exact_step_s"]}


def bench_step_path(loaded: models.Loaded, prefill: int, decode: int, bandwidth: float, docs: int = 8,
                    op: str = DECODE_POLICY) -> dict:
    """The step path as the acceptance run takes it for a decode-time policy: `docs` documents
    decoded together, one batched forward per token (`teacher.score_step_many`); its time per
    decoded token of one document against the bandwidth bound of one cached step at that context."""
    from kvutils.cache.accept import tokenize_documents
    from kvutils.cache.costs import bandwidth_bound_ms
    from kvutils.cache.registry import parse_op
    from kvutils.cache.scoring import score_step_many
    from kvutils.cache.step_batched import step_start
    from kvutils.core import data

    used, _ = tokenize_documents(loaded.tokenizer, data.load_corpus(), prefill + decode + 1, docs,
                                 skip_short=True)
    ids = torch.stack([i for _, i in used])  # (docs, prefill + decode + 1)
    policy = parse_op(op)
    starts = [step_start(loaded, policy, i, prefill) for i in ids]  # the prefills, outside the timing
    start = time.perf_counter()
    score_step_many(loaded, policy, ids, prefill, decode, starts)
    ms = 1e3 * (time.perf_counter() - start) / (len(used) * decode)
    bound = bandwidth_bound_ms(loaded, prefill + decode, bandwidth)
    return {"op": policy.spec, "documents": len(used), "prefill": prefill, "decode": decode,
            "ms_per_token": ms, "bound_ms": bound, "over_bound": ms / bound}


def bench_step_at(loaded: models.Loaded, context: int, repeats: int, bandwidth: float) -> dict:
    """One decode step with and without the cache at a long context (chapter 4's E4), and the
    bandwidth bound of the cached step at that context."""
    from kvutils.cache.costs import bandwidth_bound_ms, decode_step_times
    from kvutils.core import data

    longest = max(data.load_corpus(), key=lambda d: len(d.text))
    ids = loaded.tokenizer(longest.text, return_tensors="pt").input_ids[:, :context]
    t = decode_step_times(loaded, ids, repeats)
    return {"context": ids.shape[-1], "cached_ms": t.cached_ms, "uncached_ms": t.uncached_ms,
            "speedup": t.speedup,
            "repeats": len(t.cached_repeats_ms), "cached_repeats_ms": t.cached_repeats_ms,
            "uncached_repeats_ms": t.uncached_repeats_ms,
            "speedups": t.speedups, "threads": torch.get_num_threads(),
            "bound_ms": bandwidth_bound_ms(loaded, ids.shape[-1], bandwidth)}


def main(argv: list[str] | None = None, parsed=None) -> None:
    """The benchmark; `parsed` is what kvutils.studies.bench_args.parse(argv) returned (the command
    checks its arguments before it imports this module, and torch), else argv is parsed here."""
    args, earlier = parsed or bench_args.parse(argv)
    load_before = results.machine_load()  # other work beside the benchmark flags its page
    started = time.perf_counter()
    prompt, new, prefill, decode, context, switch_tokens = SIZES["quick" if args.quick else "full"]
    report = {"model": args.model, "profile": "quick" if args.quick else "full", "repeats": args.repeats,
              "load": bench_load(args.model)}
    loaded = models.load(args.model)
    report["decode"] = bench_decode(loaded, prompt, new, args.repeats)
    report["recompute"] = bench_recompute(loaded, prompt, new, args.repeats)
    for key, (op, dtype) in TEACHER_OPS.items():
        on = loaded if dtype == "float32" else models.load(args.model, dtype)
        # the quick profile's window must evict within its few tokens
        report[key] = bench_teacher(on, prefill, decode, QUICK_SPECS.get(op, op) if args.quick else op)
    report["decode_policy"] = bench_decode_policy(loaded, prefill, decode)
    bandwidth = memory_bandwidth()
    report["bandwidth_gb_s"] = bandwidth / 1e9
    report["step_2000"] = bench_step_at(loaded, context, args.repeats, bandwidth)
    report["step_path"] = bench_step_path(loaded, prefill, decode, bandwidth)
    del loaded
    from kvutils.studies.qwen3_switch.bench import bench as switch_bench

    report["switch"] = switch_bench(args.model, "1,2,4,L" if not args.quick else "1,L", switch_tokens,
                                    args.repeats)
    report.update(earlier)
    report["machine"] = results.machine()
    report["wall_time_s"] = time.perf_counter() - started
    report["machine_load"] = {"before": load_before, "after": results.machine_load()}
    results.write_json_atomic(Path(args.results_dir) / "bench.json", report)
    print_report(report)


def print_report(report: dict) -> None:
    """The benchmark's ratios, one line each, with the targets they are held to."""
    d, r, lo = report["decode"], report["recompute"], report["load"]
    print(f"model: {report['model']}")
    print(f"load: first (GGUF conversion) {lo['first_load_s']:.1f} s, cached {lo['cached_load_s']:.2f} s "
          f"-> {lo['speedup']:.1f}x faster (target >= 5x)")
    print(f"decode: kvutils {d['kvutils_ms_per_token']:.1f} ms/token, transformers generate "
          f"{d['generate_ms_per_token']:.1f} ms/token -> ratio {d['ratio_kvutils_over_generate']:.3f} "
          "(target <= 1.05)")
    print(f"no-cache side of chapter 1: per-step {r['per_step_s']:.2f} s vs one pass {r['one_pass_s']:.3f} s "
          f"-> {r['speedup']:.1f}x")
    for key in TEACHER_OPS:
        t = report[key]
        print(f"teacher-forced scoring ({t['op']}, {t['dtype']}, {t['prefill']}+{t['decode']} tokens): fast "
              f"{t['fast_s']:.2f} s vs step-by-step {t['step_s']:.2f} s -> {t['speedup']:.1f}x (target >= "
              f"10x); max logit diff {t['max_logit_diff']:.2e}")
    pol = report["decode_policy"]
    print(f"decode-time policy ({pol['op']}, step path only): {pol['policy_step_s']:.2f} s vs the exact "
          f"cache's fast path {pol['exact_fast_s']:.2f} s -> {pol['over_exact_fast']:.1f}x, and its step "
          f"path {pol['exact_step_s']:.2f} s -> {pol['over_exact_step']:.2f}x")
    s2k = report["step_2000"]
    print(f"decode step at {s2k['context']} tokens: cached {s2k['cached_ms']:.1f} ms vs recompute "
          f"{s2k['uncached_ms']:.0f} ms -> {s2k['speedup']:.1f}x; cached vs the bandwidth bound "
          f"{s2k['bound_ms']:.1f} ms ({report['bandwidth_gb_s']:.1f} GB/s) -> "
          f"{s2k['cached_ms'] / s2k['bound_ms']:.2f}x")
    sp = report["step_path"]
    print(f"step path ({sp['op']}, {sp['documents']} documents decoded together, "
          f"{sp['prefill']}+{sp['decode']} tokens): {sp['ms_per_token']:.1f} ms per decoded token vs the "
          f"bandwidth bound of one cached step {sp['bound_ms']:.1f} ms -> {sp['over_bound']:.2f}x")
    for k, row in report["switch"].items():
        print(f"LoRA-tail switch, k={k}: tail patch {row['tail_patch_ms']:.0f} ms vs full recompute "
              f"{row['recompute_ms']:.0f} ms -> {row['time_fraction']:.3f} of it (k/L = "
              f"{row['k_over_L']:.3f}, FLOPs {row['flops_fraction']:.3f})")
    times = report["chapter_wall_time_s"]
    for chapter, seconds in times.items():
        print(f"chapter {chapter}: {seconds:.0f} s (from its last results file)")
    if "02_bert_contrast" in times and "03_sense_probes" in times:
        both = times["02_bert_contrast"] + times["03_sense_probes"]
        print(f"chapters 2 and 3 together: {both:.0f} s (target <= 360 s on the full profile)")
    print(f"benchmark: {report['wall_time_s']:.0f} s")


def cli(argv: list[str] | None = None, parsed=None) -> int:
    """`python -m kvutils.bench` and `kvutils-bench`: Ctrl-C or SIGTERM ends with one line."""
    from kvutils.core.interrupt import run_cli

    return run_cli(lambda args: main(args, parsed), argv, "bench.json is as it was")


if __name__ == "__main__":
    sys.exit(cli())
