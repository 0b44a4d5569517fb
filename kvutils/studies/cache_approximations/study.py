"""Chapter 4: what the exact cache buys (decode-step time, E4), what it costs in memory (bytes per
token, Table 1), and what each approximation costs in quality (Table 2, by `kvutils.cache.accept`).

`plan()` takes the checked parameters (kvutils.studies.parameters), parses every cache operation and
tokenises every document before any model loads: the notebook's first cells call it.

The chapter is four units of computation (kvutils.studies.units), each in a module of its own so that
each is hashed by what it imports, not by the others' code:
- `timing`: the decode steps timed, alone in make book, since a step timed beside other work shares
  the machine's memory bandwidth;
- `retrieval_unit`: the retrieval test, one unit per model (`retrieval.score_model`);
- `table2`: Table 2, the frontier and the bytes (`costs`);
- `units.relate`: joins them into the chapter's results in seconds (`relate` below).
make book runs the first three side by side with the other chapters; a notebook run computes what it lacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kvutils.cache import sizes
from kvutils.cache.base import CacheOp
from kvutils.core import data
from kvutils.models.loading import load_tokenizer
from kvutils.studies.cache_approximations import retrieval, retrieval_unit, table2, timing
from kvutils.studies.parameters.chapter4 import Chapter4Parameters

DECODE_TIMING_FILE = timing.DECODE_TIMING_FILE  # in the results folder
RETRIEVAL_FILE = "04_retrieval.json"  # in the results folder: every retrieval model's scores
retrieval_prompts = retrieval_unit.retrieval_prompts


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
    frontier_docs: dict[str, list] = (
        None  # per frontier model: [(Document, ids)] of frontier_prefill + frontier_decode + 1
    )
    frontier_prefill: int = 0
    frontier_decode: int = 0
    retrieval_models: list[str] = None  # the long-range retrieval test (a subset of models)
    retrieval_prompts: dict[str, dict] = None  # per retrieval model: {haystack: [haystack.Prompt]}


def plan(p: Chapter4Parameters) -> Plan:
    """Prepare chapter 4 from its checked parameters: parse every cache operation, check it and
    the models against the lengths, tokenise every document; loads tokenizers only."""
    checked = table2.checked(p)
    timing.check_contexts(checked.contexts, checked.models)
    retrieval_names = retrieval_unit.retrieval_models(p, checked.names)
    costs = table2.plan(p, checked)
    corpus_docs = data.load_corpus(p.corpus)
    ids = {
        name: timing.timing_ids(load_tokenizer(name), corpus_docs, checked.contexts, p.corpus, name)
        for name in checked.names
    }
    prompts = {name: retrieval_unit.retrieval_prompts(load_tokenizer(name), p) for name in retrieval_names}
    return Plan(
        costs.models,
        costs.table2_models,
        costs.ops,
        costs.chunk_ops,
        costs.docs,
        costs.skipped,
        ids,
        costs.contexts,
        p.prefill,
        p.decode,
        p.chunk_decode,
        p.timing_repeats,
        p.device,
        costs.frontier_models,
        costs.frontier_ops,
        costs.frontier_docs,
        p.frontier_prefill,
        p.frontier_decode,
        retrieval_names,
        prompts,
    )


def relate(timings: dict, scored: dict, costs_numbers: dict) -> dict:
    """Chapter 4's numbers from its three parts: the decode timings, the retrieval test ({model: per
    haystack}) and the costs; each retrieval row reads the frontier's KL of its model.
    numbers = {"bandwidth_gb_s", "decode": {model: ...}, "decode_timing": {where, threads, cores},
    "bytes": [...], "table2": {model: {"plain": accept run, "chunks": accept run}},
    "frontier": {model: accept run at frontier_prefill + frontier_decode, analysed by `frontier.analyse`
    (per op "per_doc_kl", "mean_held_bytes", "level"; "verdicts", "levels", "construction_ties")},
    "retrieval": {model: `retrieval.run_model`}}."""
    numbers = {
        "bandwidth_gb_s": timings["bandwidth_gb_s"],
        "decode": timings["decode"],
        "decode_timing": {k: timings[k] for k in ("where", "threads", "cores")},
        "table2": costs_numbers["table2"],
        "frontier": costs_numbers["frontier"],
        "retrieval": {},
    }
    for name, per_haystack in scored.items():
        numbers["retrieval"][name] = retrieval.with_kl(per_haystack, numbers["frontier"].get(name))
    rows = [dict(row) for row in costs_numbers["bytes"]]
    ours = [row for row in rows if row["source"] == "ours"]
    for row, name in zip(ours, costs_numbers["bytes_models"], strict=True):
        row["measured_kib_per_token"] = timings["cache_bytes"][name] / row["check_tokens"] / sizes.KIB
    numbers["bytes"] = rows
    return numbers
