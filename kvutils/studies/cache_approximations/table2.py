"""Chapter 4's costs unit: Table 2 (every cache operation scored by the acceptance test,
`kvutils.cache.accept`), the frontier (`frontier.analyse`) and Table 1's bytes by formula. It
imports neither the decode timing nor the retrieval test (kvutils.studies.units hashes this
module's import closure), so a change to either leaves these numbers standing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

from kvutils.cache import sizes
from kvutils.cache.accept import accept_many, tokenize_documents
from kvutils.cache.base import CacheOp
from kvutils.cache.methods.chunk_blend import ChunkBlend
from kvutils.cache.methods.chunk_reuse import ChunkReuse
from kvutils.cache.registry import ARTICLE_OPS, EXTRA_OPS, parse_ops
from kvutils.core import checks, data, results
from kvutils.core.article import article
from kvutils.models.checks import check_models
from kvutils.models.layers import kv_shape
from kvutils.models.loading import load, load_tokenizer
from kvutils.studies.cache_approximations import frontier
from kvutils.studies.parameters.chapter4 import DEFAULT_OPS, Chapter4Parameters

COSTS_FILE = "04_costs.json"  # in the results folder
CHUNK_OPS = (ChunkReuse, ChunkBlend)


@dataclass
class Checked:
    """The costs' parameters, checked before any document is tokenised or any model loads."""

    models: list  # the chapter's models, resolved (kvutils.models.checks)
    table2_models: list[str]  # Table 2 (a subset of models)
    ops: list[CacheOp]  # scored at prefill + decode
    chunk_ops: list[CacheOp]  # scored at prefill + chunk_decode (the article's 128 + 128 + 64)
    contexts: list[int]
    frontier_models: list[str]  # the frontier (a subset of models)
    frontier_ops: list[CacheOp]

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.models]


@dataclass
class CostsPlan:
    models: list[str]  # Table 1's bytes
    table2_models: list[str]
    ops: list[CacheOp]
    chunk_ops: list[CacheOp]
    docs: dict[str, list]  # per Table 2 model: [(Document, ids)] long enough for prefill + decode + 1
    skipped: dict[str, list]  # per Table 2 model: [(document id, tokens)] left out as too short
    contexts: list[int]
    prefill: int
    decode: int
    chunk_decode: int
    device: str
    frontier_models: list[str]
    frontier_ops: list[CacheOp]
    frontier_docs: dict[
        str, list
    ]  # per frontier model: [(Document, ids)] of frontier_prefill + frontier_decode + 1
    frontier_prefill: int
    frontier_decode: int


def parse_op_list(value: str, parameter: str = "ops", default=ARTICLE_OPS + EXTRA_OPS) -> list[CacheOp]:
    """`"default"`, or operation specs separated by semicolons (a spec's own settings use commas:
    "window:size=128,sinks=4; quantize_kivi:bits=4")."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f'{parameter}: give "default" or cache-operation specs separated by ";"')
    specs = default if value.strip() == DEFAULT_OPS else [s for s in value.split(";") if s.strip()]
    if not specs:
        raise ValueError(
            f'{parameter}: {value!r} names no operation; give "default" or specs separated by ";"'
        )
    try:
        return parse_ops(specs)
    except ValueError as err:
        raise ValueError(f"{parameter}: {err}") from None


def _check_lengths(parameter: str, op: CacheOp, prefill: int, decode: int) -> None:
    try:
        op.check_lengths(prefill, decode)
    except ValueError as err:
        raise ValueError(f"{parameter}: {err}") from None


def checked(p: Chapter4Parameters) -> Checked:
    """Parse every cache operation and check it and the models against the lengths; loads nothing."""
    context_list = checks.check_int_list("contexts", p.contexts, 1)
    operations = parse_op_list(p.ops)
    frontier_specs = frontier.default_specs(p.frontier_prefill, p.frontier_decode)
    front_ops = parse_op_list(p.frontier_ops, "frontier_ops", frontier_specs)
    for op in front_ops:
        if isinstance(op, CHUNK_OPS):
            raise ValueError(
                f"frontier_ops: {op.spec} is a chunk operation; the frontier scores prefill + decode"
            )
    plain = [op for op in operations if not isinstance(op, CHUNK_OPS)]
    chunked = [op for op in operations if isinstance(op, CHUNK_OPS)]
    for op in plain:
        _check_lengths("ops", op, p.prefill, p.decode)
    for op in chunked:
        _check_lengths("ops", op, p.prefill, p.chunk_decode)
    resolved = check_models(
        "models",
        p.models,
        family="causal",
        min_context=p.prefill + max(p.decode, p.chunk_decode) + 1,
        context_from="prefill + decode + 1, and prefill + chunk_decode + 1",
    )
    names = [r.name for r in resolved]
    table2 = [r.name for r in check_models("table2_models", p.table2_models, family="causal")]
    outside = [m for m in table2 if m not in names]
    if outside:
        raise ValueError(
            f"table2_models: {outside} not in models ({', '.join(names)}); Table 2 runs on a subset of them"
        )
    front = (
        [
            r.name
            for r in check_models(
                "frontier_models",
                p.frontier_models,
                family="causal",
                min_context=p.frontier_prefill + p.frontier_decode + 1,
                context_from="frontier_prefill + frontier_decode + 1",
            )
        ]
        if not isinstance(p.frontier_models, str) or p.frontier_models.strip()
        else []
    )  # "" or " ": no frontier
    outside = [m for m in front if m not in names]
    if outside:
        raise ValueError(
            f"frontier_models: {outside} not in models ({', '.join(names)}); the frontier runs on a subset "
            "of them"
        )
    for op in front_ops if front else []:  # with no frontier model, frontier_ops are not run
        _check_lengths("frontier_ops", op, p.frontier_prefill, p.frontier_decode)
    return Checked(resolved, table2, plain, chunked, context_list, front, front_ops)


def plan(p: Chapter4Parameters, check: Checked | None = None) -> CostsPlan:
    """The costs' plan: `checked`, then every document tokenised (tokenizers only)."""
    c = check or checked(p)
    corpus_docs = data.load_corpus(p.corpus)
    docs, skipped, front_docs = {}, {}, {}
    for name in c.names:
        tokenizer = load_tokenizer(name)
        if name in c.table2_models:
            docs[name], skipped[name] = tokenize_documents(
                tokenizer,
                corpus_docs,
                p.prefill + p.decode + 1,
                p.n_docs,
                skip_short=p.skip_short,
                parameter="corpus",
            )
        if name in c.frontier_models:  # always skips short ones: the frontier needs long documents
            front_docs[name], _ = _frontier_documents(
                tokenizer, corpus_docs, p.frontier_prefill + p.frontier_decode + 1, p.frontier_docs, p.corpus
            )
    return CostsPlan(
        c.names,
        c.table2_models,
        c.ops,
        c.chunk_ops,
        docs,
        skipped,
        c.contexts,
        p.prefill,
        p.decode,
        p.chunk_decode,
        p.device,
        c.frontier_models,
        c.frontier_ops,
        front_docs,
        p.frontier_prefill,
        p.frontier_decode,
    )


def _frontier_documents(tokenizer, corpus_docs, length: int, n: int, corpus: str):
    try:
        return tokenize_documents(tokenizer, corpus_docs, length, n, skip_short=True, parameter="corpus")
    except ValueError as err:
        raise ValueError(
            f"frontier_docs / frontier_prefill / frontier_decode: {err} (in {corpus!r}; lower "
            "frontier_docs or the frontier's lengths)"
        ) from None


def bytes_rows(loaded_configs: dict, check_tokens: int) -> list[dict]:
    """Table 1: the article's six configurations, then ours (formula at 16 bits, as the article's,
    and a real fp32 cache of `check_tokens` tokens against the formula; `relate` adds the bytes the
    timing unit measured in a real cache)."""
    rows = []
    for r in article()["table1_bytes_per_token"]:
        per_token = sizes.published_bytes(r)
        rows.append(
            {
                **{k: r.get(k) for k in ("model", "attention", "layers", "kv_heads", "head_dim")},
                "source": "published",
                "kib_per_token": per_token / sizes.KIB,
                "gib_per_128k": per_token * sizes.SEQUENCE_128K / sizes.GIB,
                "gib_per_128k_held": per_token * sizes.SEQUENCE_128K / sizes.GIB,  # no windowed layers
                "article_kib_per_token": r["kib_per_token"],
                "article_gib_per_128k": r["gib_per_128k"],
            }
        )
    for name, config in loaded_configs.items():
        kv_heads, head_dim = kv_shape(config)
        per_token = sizes.kv_bytes_per_token(config.num_hidden_layers, kv_heads, head_dim, 2)
        fp32 = sizes.model_cache_bytes(config, check_tokens, torch.float32)
        attention = "GQA" if kv_heads < config.num_attention_heads else "MHA"
        if fp32["sliding_layers"]:
            attention += f", {fp32['sliding_layers']} of {config.num_hidden_layers} layers windowed"
        rows.append(
            {
                "model": f"{name} (this book)",
                "attention": attention,
                "layers": config.num_hidden_layers,
                "kv_heads": kv_heads,
                "head_dim": head_dim,
                "source": "ours",
                "kib_per_token": per_token / sizes.KIB,
                "gib_per_128k": per_token * sizes.SEQUENCE_128K / sizes.GIB,
                # what the cache holds: a sliding-window layer keeps its window, not 128K positions
                "gib_per_128k_held": sizes.model_cache_bytes(config, sizes.SEQUENCE_128K, torch.bfloat16)[
                    "held"
                ]
                / sizes.GIB,
                "check_tokens": check_tokens,
                "formula_kib_per_token_fp32": fp32["full_model_formula"] / check_tokens / sizes.KIB,
                "held_kib_per_token_fp32": fp32["held"] / check_tokens / sizes.KIB,
            }
        )
    return rows


def score_costs(p: CostsPlan) -> tuple[dict, list[dict]]:
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
                if p.chunk_ops
                else None,
            }
        if name in (p.frontier_models or []):
            texts = [doc for doc, _ in p.frontier_docs[name]]
            scored = accept_many(loaded, p.frontier_ops, texts, p.frontier_prefill, p.frontier_decode)
            numbers["frontier"][name] = frontier.analyse(scored, loaded.config, p.frontier_ops)
        del loaded
    numbers["bytes"] = bytes_rows(configs, max(p.contexts))
    numbers["bytes_models"] = list(configs)
    return numbers, described


def compute(p: Chapter4Parameters, folder: Path, unit) -> None:
    """The unit (kvutils.studies.units.COSTS): Table 2, the frontier and Table 1's bytes, written
    atomically."""
    started = time.time()
    numbers, described = score_costs(plan(p))
    results.write_json_atomic(
        Path(folder) / unit.outputs[0],
        {
            "numbers": results.as_written(numbers),
            "models": described,
            "wall_time_s": round(time.time() - started, 2),
        },
    )
