"""Chapter 4: what the exact cache buys (decode-step time, E4), what it costs in memory (bytes per
token, Table 1), and what each approximation costs in quality (Table 2, by `kvutils.cache.accept`).

`plan()` takes the checked parameters (kvutils.studies.parameters), parses every cache operation and
tokenises every document before any model loads.

The chapter is four units of computation (kvutils.studies.units; their functions are in
`kvutils.studies.cache_approximations.units`): the decode steps timed (`decode_timings`), alone
in make book, since a step timed beside other work shares the machine's memory bandwidth; the
retrieval test, one unit per model (`retrieval.score_model`); Table 2, the frontier and the bytes
(`costs`); and `relate`, which joins them into the chapter's results in seconds. make book runs
the first three side by side with the other chapters; a notebook run computes what it lacks.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from kvutils.cache import costs, sizes
from kvutils.cache.accept import accept_many, tokenize_documents
from kvutils.cache.base import CacheOp
from kvutils.cache.methods.chunk_blend import ChunkBlend
from kvutils.cache.methods.chunk_reuse import ChunkReuse
from kvutils.cache.registry import ARTICLE_OPS, EXTRA_OPS, parse_ops
from kvutils.core import checkpoints, checks, data, haystack
from kvutils.core.article import article
from kvutils.models.checks import check_models
from kvutils.models.layers import kv_shape
from kvutils.models.loading import load, load_tokenizer
from kvutils.studies.cache_approximations import followups, frontier, retrieval
from kvutils.studies.parameters.chapter4 import DEFAULT_OPS, Chapter4Parameters

DECODE_TIMING_FILE = "04_decode_timing.json"  # in the results folder
RETRIEVAL_FILE = "04_retrieval.json"  # in the results folder: every retrieval model's scores
CHUNK_OPS = (ChunkReuse, ChunkBlend)


@dataclass
class Plan:
    models: list[str]  # E4 and Table 1
    table2_models: list[str]  # Table 2 (a subset of models)
    ops: list[CacheOp]  # scored at prefill + decode
    chunk_ops: list[CacheOp]  # scored at prefill + chunk_decode (the article's 128 + 128 + 64)
    docs: dict[str, list]  # per model: [(Document, ids)] long enough for prefill + decode + 1
    skipped: dict[str, list]  # per model: [(document id, tokens)] left out as too short
    timing_ids: dict[str, torch.Tensor]  # per model, (1, max context) ids of one real document
    contexts: list[int]
    prefill: int
    decode: int
    chunk_decode: int
    timing_repeats: int
    device: str
    frontier_models: list[str] = None  # the frontier (a subset of models)
    frontier_ops: list[CacheOp] = None
    frontier_docs: dict[str, list] = None  # per frontier model: [(Document, ids)] of frontier_prefill + frontier_decode + 1
    frontier_prefill: int = 0
    frontier_decode: int = 0
    retrieval_models: list[str] = None  # the long-range retrieval test (a subset of models)
    retrieval_prompts: dict[str, dict] = None  # per retrieval model: {haystack: [haystack.Prompt]}


def parse_op_list(value: str, parameter: str = "ops", default=ARTICLE_OPS + EXTRA_OPS) -> list[CacheOp]:
    """`"default"`, or operation specs separated by semicolons (a spec's own settings use commas:
    "window:size=128,sinks=4; quantize_kivi:bits=4")."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f'{parameter}: give "default" or cache-operation specs separated by ";"')
    specs = default if value.strip() == DEFAULT_OPS else [s for s in value.split(";") if s.strip()]
    if not specs:
        raise ValueError(f'{parameter}: {value!r} names no operation; give "default" or specs separated by ";"')
    try:
        return parse_ops(specs)
    except ValueError as err:
        raise ValueError(f"{parameter}: {err}") from None


def _check_lengths(parameter: str, op: CacheOp, prefill: int, decode: int) -> None:
    try:
        op.check_lengths(prefill, decode)
    except ValueError as err:
        raise ValueError(f"{parameter}: {err}") from None


def plan(p: Chapter4Parameters) -> Plan:
    """Prepare chapter 4 from its checked parameters: parse every cache operation, check it and
    the models against the lengths, tokenise every document; loads tokenizers only."""
    context_list = checks.check_int_list("contexts", p.contexts, 1)
    operations = parse_op_list(p.ops)
    frontier_specs = frontier.default_specs(p.frontier_prefill, p.frontier_decode)
    front_ops = parse_op_list(p.frontier_ops, "frontier_ops", frontier_specs)
    for op in front_ops:
        if isinstance(op, CHUNK_OPS):
            raise ValueError(f"frontier_ops: {op.spec} is a chunk operation; the frontier scores prefill + decode")
    plain = [op for op in operations if not isinstance(op, CHUNK_OPS)]
    chunked = [op for op in operations if isinstance(op, CHUNK_OPS)]
    for op in plain:
        _check_lengths("ops", op, p.prefill, p.decode)
    for op in chunked:
        _check_lengths("ops", op, p.prefill, p.chunk_decode)
    resolved = check_models("models", p.models, family="causal",
                            min_context=p.prefill + max(p.decode, p.chunk_decode) + 1,
                            context_from="prefill + decode + 1, and prefill + chunk_decode + 1")
    for r in resolved:
        if max(context_list) + 1 > r.context:
            raise ValueError(f"contexts: {max(context_list)} is longer than {r.name} handles ({r.context} tokens, "
                             "one of which the timed step adds)")
    names = [r.name for r in resolved]
    table2 = [r.name for r in check_models("table2_models", p.table2_models, family="causal")]
    outside = [m for m in table2 if m not in names]
    if outside:
        raise ValueError(f"table2_models: {outside} not in models ({', '.join(names)}); Table 2 runs on a subset of them")
    front = [r.name for r in check_models("frontier_models", p.frontier_models, family="causal",
                                          min_context=p.frontier_prefill + p.frontier_decode + 1,
                                          context_from="frontier_prefill + frontier_decode + 1")] \
        if not isinstance(p.frontier_models, str) or p.frontier_models.strip() else []  # "" or " ": no frontier
    outside = [m for m in front if m not in names]
    if outside:
        raise ValueError(f"frontier_models: {outside} not in models ({', '.join(names)}); the frontier runs on a subset of them")
    for op in front_ops if front else []:  # with no frontier model, frontier_ops are not run
        _check_lengths("frontier_ops", op, p.frontier_prefill, p.frontier_decode)
    retrieval_names = _retrieval_models(p, names)
    corpus_docs = data.load_corpus(p.corpus)
    docs, skipped, timing, front_docs = {}, {}, {}, {}
    for name in names:
        tokenizer = load_tokenizer(name)
        if name in table2:
            docs[name], skipped[name] = tokenize_documents(
                tokenizer, corpus_docs, p.prefill + p.decode + 1, p.n_docs, skip_short=p.skip_short, parameter="corpus")
        if name in front:  # always skips short ones: the frontier needs long documents, Table 2 says which are short
            front_docs[name], _ = _frontier_documents(tokenizer, corpus_docs, p.frontier_prefill + p.frontier_decode + 1,
                                                      p.frontier_docs, p.corpus)
        longest = max(corpus_docs, key=lambda d: len(d.text))
        ids = tokenizer(longest.text, add_special_tokens=True).input_ids
        if len(ids) < max(context_list):
            raise ValueError(f"contexts: the longest document of {p.corpus!r} ({longest.id}) has {len(ids)} "
                             f"tokens for {name}, fewer than {max(context_list)}")
        timing[name] = torch.tensor([ids[:max(context_list)]])
    prompts = {name: retrieval_prompts(load_tokenizer(name), p) for name in retrieval_names}
    return Plan(names, table2, plain, chunked, docs, skipped, timing, context_list, p.prefill, p.decode,
                p.chunk_decode, p.timing_repeats, p.device, front, front_ops, front_docs, p.frontier_prefill,
                p.frontier_decode, retrieval_names, prompts)


def _retrieval_models(p: Chapter4Parameters, names: list[str]) -> list[str]:
    """The retrieval test's models, checked against its longest prompt before any model loads."""
    if isinstance(p.retrieval_models, str) and not p.retrieval_models.strip():
        return []
    longest = max(checks.check_int_list("retrieval_contexts", p.retrieval_contexts, haystack.MIN_CONTEXT,
                                        haystack.MAX_CONTEXT))
    chosen = [r.name for r in check_models("retrieval_models", p.retrieval_models, family="causal",
                                           min_context=longest, context_from="the longest of retrieval_contexts")]
    outside = [m for m in chosen if m not in names]
    if outside:
        raise ValueError(f"retrieval_models: {outside} not in models ({', '.join(names)}); the retrieval test runs on "
                         "a subset of them")
    return chosen


def retrieval_prompts(tokenizer, p: Chapter4Parameters) -> dict[str, list]:
    """{haystack: prompts}: RULER's magic numbers in `retrieval_corpus`, the pass key in the filler."""
    contexts = checks.check_int_list("retrieval_contexts", p.retrieval_contexts, haystack.MIN_CONTEXT,
                                     haystack.MAX_CONTEXT)
    depths = haystack.check_depths(p.retrieval_depths, "retrieval_depths")
    out = {p.retrieval_corpus: haystack.build_prompts(tokenizer, p.retrieval_corpus, contexts, depths,
                                                       p.retrieval_prompts, needle="magic", distractors=0,
                                                       parameter="retrieval_corpus",
                                                       turns=min(followups.TURNS, len(depths)))}
    if p.filler_prompts:
        out["filler"] = haystack.build_prompts(tokenizer, "filler", contexts, depths, p.filler_prompts, needle="passkey")
    return out


def _frontier_documents(tokenizer, corpus_docs, length: int, n: int, corpus: str):
    try:
        return tokenize_documents(tokenizer, corpus_docs, length, n, skip_short=True, parameter="corpus")
    except ValueError as err:
        raise ValueError(f"frontier_docs / frontier_prefill / frontier_decode: {err} (in {corpus!r}; lower "
                         "frontier_docs or the frontier's lengths)") from None


def bytes_rows(loaded_configs: dict, check_tokens: int) -> list[dict]:
    """Table 1: the article's six configurations, then ours (formula at 16 bits, as the article's,
    and a real fp32 cache of `check_tokens` tokens against the formula; `relate` adds the bytes the
    timing unit measured in a real cache)."""
    rows = []
    for r in article()["table1_bytes_per_token"]:
        per_token = sizes.published_bytes(r)
        rows.append({**{k: r.get(k) for k in ("model", "attention", "layers", "kv_heads", "head_dim")},
                     "source": "published", "kib_per_token": per_token / sizes.KIB,
                     "gib_per_128k": per_token * sizes.SEQUENCE_128K / sizes.GIB,
                     "gib_per_128k_held": per_token * sizes.SEQUENCE_128K / sizes.GIB,  # no windowed layers
                     "article_kib_per_token": r["kib_per_token"], "article_gib_per_128k": r["gib_per_128k"]})
    for name, config in loaded_configs.items():
        kv_heads, head_dim = kv_shape(config)
        per_token = sizes.kv_bytes_per_token(config.num_hidden_layers, kv_heads, head_dim, 2)
        fp32 = sizes.model_cache_bytes(config, check_tokens, torch.float32)
        attention = "GQA" if kv_heads < config.num_attention_heads else "MHA"
        if fp32["sliding_layers"]:
            attention += f", {fp32['sliding_layers']} of {config.num_hidden_layers} layers windowed"
        rows.append({"model": f"{name} (this book)", "attention": attention, "layers": config.num_hidden_layers,
                     "kv_heads": kv_heads, "head_dim": head_dim, "source": "ours",
                     "kib_per_token": per_token / sizes.KIB,
                     "gib_per_128k": per_token * sizes.SEQUENCE_128K / sizes.GIB,
                     # what the cache holds: a sliding-window layer keeps its window, not 128K positions
                     "gib_per_128k_held": sizes.model_cache_bytes(config, sizes.SEQUENCE_128K, torch.bfloat16)["held"]
                     / sizes.GIB,
                     "check_tokens": check_tokens,
                     "formula_kib_per_token_fp32": fp32["full_model_formula"] / check_tokens / sizes.KIB,
                     "held_kib_per_token_fp32": fp32["held"] / check_tokens / sizes.KIB})
    return rows


def decode_timings(p: Plan, where: str) -> dict:
    """E4 and the measured side of Table 1: one decode step with and without the cache at every
    context of every model, the machine's memory bandwidth, and the bytes a real cache held at the
    longest context. `where` says how the timings were taken (shown on the page)."""
    bandwidth = costs.memory_bandwidth()
    out = {"where": where, "threads": torch.get_num_threads(), "cores": os.cpu_count(),
           "bandwidth_gb_s": bandwidth / 1e9, "decode": {}, "cache_bytes": {}, "key": _timing_key(p)}
    started = time.time()
    for name in p.models:
        loaded = load(name, "float32", device=p.device)
        steps = []
        for context in p.contexts:
            t = costs.decode_step_times(loaded, p.timing_ids[name][:, :context], p.timing_repeats)
            if context == max(p.contexts):  # the longest timed context doubles as the bytes check
                out["cache_bytes"][name] = t.cache_bytes
            steps.append({"context": context, "cached_ms": t.cached_ms, "uncached_ms": t.uncached_ms,
                          "speedup": t.speedup, "repeats": len(t.cached_repeats_ms), "cached_repeats_ms": t.cached_repeats_ms,
                          "uncached_repeats_ms": t.uncached_repeats_ms, "speedups": t.speedups,
                          "analytical_ratio": costs.step_flops(loaded, context, False) / costs.step_flops(loaded, context, True),
                          "bound_ms": costs.bandwidth_bound_ms(loaded, context, bandwidth)})
        out["decode"][name] = {"steps": steps}
        del loaded
    out["wall_time_s"] = round(time.time() - started, 2)
    return out


def _timing_key(p: Plan) -> dict:
    """What the timings depend on: a file timed for other settings must not be read."""
    return {"models": p.models, "contexts": p.contexts, "timing_repeats": p.timing_repeats, "device": p.device,
            "timing_ids": {m: ids[0].tolist()[:8] + [int(ids.shape[-1])] for m, ids in p.timing_ids.items()}}


def retrieval_key(p: Plan) -> dict:
    """What the retrieval test's results depend on besides kvutils' sources: its models and prompts."""
    return {"models": list(p.retrieval_models or []), "device": p.device,
            "prompts": {m: {hay: checkpoints.digest([q.record() for q in qs], [q.ids for q in qs])
                            for hay, qs in p.retrieval_prompts[m].items()} for m in p.retrieval_models or []}}


def score_costs(p: Plan) -> tuple[dict, list[dict]]:
    """Table 2, the frontier and the bytes of Table 1 without the measured cache (the timing unit
    measures it): ({"table2": {model: ...}, "frontier": {model: `frontier.analyse`}, "bytes": rows,
    "bytes_models": the model of each of our rows}, the models described)."""
    numbers = {"table2": {}, "frontier": {}}
    described, configs = [], {}
    for name in p.models:
        loaded = load(name, "float32", device=p.device)
        described.append(loaded.describe())
        configs[name] = loaded.config
        if name in p.table2_models:
            texts = [doc for doc, _ in p.docs[name]]
            numbers["table2"][name] = {
                "skipped_short": [{"id": i, "tokens": n} for i, n in p.skipped[name]],
                "plain": accept_many(loaded, p.ops, texts, p.prefill, p.decode) if p.ops else None,
                "chunks": accept_many(loaded, p.chunk_ops, texts, p.prefill, p.chunk_decode)
                if p.chunk_ops else None,
            }
        if name in (p.frontier_models or []):
            texts = [doc for doc, _ in p.frontier_docs[name]]
            scored = accept_many(loaded, p.frontier_ops, texts, p.frontier_prefill, p.frontier_decode)
            numbers["frontier"][name] = frontier.analyse(scored, loaded.config, p.frontier_ops)
        del loaded
    numbers["bytes"] = bytes_rows(configs, max(p.contexts))
    numbers["bytes_models"] = list(configs)
    return numbers, described


def relate(timings: dict, scored: dict, costs_numbers: dict) -> dict:
    """Chapter 4's numbers from its three parts: the decode timings, the retrieval test ({model: per
    haystack}) and the costs; each retrieval row reads the frontier's KL of its model.
    numbers = {"bandwidth_gb_s", "decode": {model: ...}, "decode_timing": {where, threads, cores},
    "bytes": [...], "table2": {model: {"plain": accept run, "chunks": accept run}},
    "frontier": {model: accept run at frontier_prefill + frontier_decode, analysed by `frontier.analyse`
    (per op "per_doc_kl", "mean_held_bytes", "level"; "verdicts", "levels", "construction_ties")},
    "retrieval": {model: `retrieval.run_model`}}."""
    numbers = {"bandwidth_gb_s": timings["bandwidth_gb_s"], "decode": timings["decode"],
               "decode_timing": {k: timings[k] for k in ("where", "threads", "cores")},
               "table2": costs_numbers["table2"], "frontier": costs_numbers["frontier"], "retrieval": {}}
    for name, per_haystack in scored.items():
        numbers["retrieval"][name] = retrieval.with_kl(per_haystack, numbers["frontier"].get(name))
    rows = [dict(row) for row in costs_numbers["bytes"]]
    ours = [row for row in rows if row["source"] == "ours"]
    for row, name in zip(ours, costs_numbers["bytes_models"], strict=True):
        row["measured_kib_per_token"] = timings["cache_bytes"][name] / row["check_tokens"] / sizes.KIB
    numbers["bytes"] = rows
    return numbers
