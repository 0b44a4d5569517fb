"""Chapter 4's timing unit: one decode step with and without the cache at every context of every
model, the machine's memory bandwidth, and the bytes a real cache held (E4 and the measured side
of Table 1). It imports neither the retrieval test nor Table 2, so a change to either leaves the
timings standing (kvutils.studies.units hashes this module's import closure)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from kvutils.cache import costs
from kvutils.core import checks, cores, data, results
from kvutils.models.checks import check_models
from kvutils.models.loading import load, load_tokenizer
from kvutils.studies.parameters.chapter4 import Chapter4Parameters

DECODE_TIMING_FILE = "04_decode_timing.json"  # in the results folder


@dataclass
class TimingPlan:
    models: list[str]
    contexts: list[int]
    timing_ids: dict[str, torch.Tensor]  # per model, (1, max context) ids of one real document
    timing_repeats: int
    device: str


def check_contexts(contexts: list[int], resolved) -> None:
    """Every timed context fits every model, with the one token the timed step adds."""
    for r in resolved:
        if max(contexts) + 1 > r.context:
            raise ValueError(
                f"contexts: {max(contexts)} is longer than {r.name} handles ({r.context} tokens, "
                "one of which the timed step adds)"
            )


def timing_ids(tokenizer, corpus_docs, contexts: list[int], corpus: str, name: str) -> torch.Tensor:
    """(1, max context) ids of the corpus's longest document, the text every step is timed on."""
    longest = max(corpus_docs, key=lambda d: len(d.text))
    ids = tokenizer(longest.text, add_special_tokens=True).input_ids
    if len(ids) < max(contexts):
        raise ValueError(
            f"contexts: the longest document of {corpus!r} ({longest.id}) has {len(ids)} "
            f"tokens for {name}, fewer than {max(contexts)}"
        )
    return torch.tensor([ids[: max(contexts)]])


def plan(p: Chapter4Parameters) -> TimingPlan:
    """What the timing unit reads of the checked parameters (the chapter's `study.plan` checks the rest)."""
    contexts = checks.check_int_list("contexts", p.contexts, 1)
    resolved = check_models("models", p.models, family="causal")
    check_contexts(contexts, resolved)
    corpus_docs = data.load_corpus(p.corpus)
    ids = {
        r.name: timing_ids(load_tokenizer(r.name), corpus_docs, contexts, p.corpus, r.name) for r in resolved
    }
    return TimingPlan([r.name for r in resolved], contexts, ids, p.timing_repeats, p.device)


def decode_timings(p: TimingPlan, where: str) -> dict:
    """E4 and the measured side of Table 1: one decode step with and without the cache at every
    context of every model, the machine's memory bandwidth, and the bytes a real cache held at the
    longest context. `where` says how the timings were taken (shown on the page)."""
    bandwidth = costs.memory_bandwidth()
    out = {
        "where": where,
        "threads": torch.get_num_threads(),
        "cores": os.cpu_count(),
        "bandwidth_gb_s": bandwidth / 1e9,
        "decode": {},
        "cache_bytes": {},
        "key": timing_key(p),
    }
    started = time.time()
    for name in p.models:
        loaded = load(name, "float32", device=p.device)
        steps = []
        for context in p.contexts:
            t = costs.decode_step_times(loaded, p.timing_ids[name][:, :context], p.timing_repeats)
            if context == max(p.contexts):  # the longest timed context doubles as the bytes check
                out["cache_bytes"][name] = t.cache_bytes
            steps.append(
                {
                    "context": context,
                    "cached_ms": t.cached_ms,
                    "uncached_ms": t.uncached_ms,
                    "speedup": t.speedup,
                    "repeats": len(t.cached_repeats_ms),
                    "cached_repeats_ms": t.cached_repeats_ms,
                    "uncached_repeats_ms": t.uncached_repeats_ms,
                    "speedups": t.speedups,
                    "analytical_ratio": costs.step_flops(loaded, context, False)
                    / costs.step_flops(loaded, context, True),
                    "bound_ms": costs.bandwidth_bound_ms(loaded, context, bandwidth),
                }
            )
        out["decode"][name] = {"steps": steps}
        del loaded
    out["wall_time_s"] = round(time.time() - started, 2)
    return out


def timing_key(p: TimingPlan) -> dict:
    """What the timings depend on: a file timed for other settings must not be read."""
    return {
        "models": p.models,
        "contexts": p.contexts,
        "timing_repeats": p.timing_repeats,
        "device": p.device,
        "timing_ids": {m: ids[0].tolist()[:8] + [int(ids.shape[-1])] for m, ids in p.timing_ids.items()},
    }


def compute(p: Chapter4Parameters, folder: Path, unit) -> None:
    """The unit (kvutils.studies.units.TIMING): the decode steps with and without the cache, and the
    bytes a real cache held, written atomically."""
    alone = bool(os.environ.get(cores.JOB_ENV))  # make book runs this unit alone, on every core
    where = (
        "alone, as the build's first job, before the chapters ran side by side"
        if alone
        else "in this chapter's run"
    )
    results.write_json_atomic(Path(folder) / unit.outputs[0], decode_timings(plan(p), where))
