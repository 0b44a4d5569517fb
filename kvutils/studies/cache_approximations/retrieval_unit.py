"""Chapter 4's retrieval unit: the long-range retrieval test's prompts, built from the checked
parameters, and one model scored on them (`retrieval.score_model`). make book runs it once per
retrieval model. It imports neither the decode timing nor Table 2 (kvutils.studies.units hashes
this module's import closure), so a change to the haystacks recomputes retrieval only."""

from __future__ import annotations

import time
from pathlib import Path

from kvutils.core import checkpoints, checks, haystack, results
from kvutils.models.checks import check_models
from kvutils.models.loading import load, load_tokenizer
from kvutils.studies.cache_approximations import followups, retrieval
from kvutils.studies.parameters.chapter4 import Chapter4Parameters


def retrieval_models(p: Chapter4Parameters, names: list[str] | None = None) -> list[str]:
    """The retrieval test's models, checked against its longest prompt before any model loads, and
    against the chapter's `names` (its models) where given."""
    if isinstance(p.retrieval_models, str) and not p.retrieval_models.strip():
        return []
    longest = max(
        checks.check_int_list(
            "retrieval_contexts", p.retrieval_contexts, haystack.MIN_CONTEXT, haystack.MAX_CONTEXT
        )
    )
    chosen = [
        r.name
        for r in check_models(
            "retrieval_models",
            p.retrieval_models,
            family="causal",
            min_context=longest,
            context_from="the longest of retrieval_contexts",
        )
    ]
    outside = [m for m in chosen if m not in names] if names is not None else []
    if outside:
        raise ValueError(
            f"retrieval_models: {outside} not in models ({', '.join(names)}); the retrieval test runs on "
            "a subset of them"
        )
    return chosen


def retrieval_prompts(tokenizer, p: Chapter4Parameters) -> dict[str, list]:
    """{haystack: prompts}: RULER's magic numbers in `retrieval_corpus`, the pass key in the filler."""
    contexts = checks.check_int_list(
        "retrieval_contexts", p.retrieval_contexts, haystack.MIN_CONTEXT, haystack.MAX_CONTEXT
    )
    depths = haystack.check_depths(p.retrieval_depths, "retrieval_depths")
    out = {
        p.retrieval_corpus: haystack.build_prompts(
            tokenizer,
            p.retrieval_corpus,
            contexts,
            depths,
            p.retrieval_prompts,
            needle="magic",
            distractors=0,
            parameter="retrieval_corpus",
            turns=min(followups.TURNS, len(depths)),
        )
    }
    if p.filler_prompts:
        out["filler"] = haystack.build_prompts(
            tokenizer, "filler", contexts, depths, p.filler_prompts, needle="passkey"
        )
    return out


def retrieval_key(models: list[str], device: str, prompts: dict[str, dict]) -> dict:
    """What the retrieval test's results depend on besides kvutils' sources: its models and prompts."""
    return {
        "models": list(models),
        "device": device,
        "prompts": {
            m: {
                hay: checkpoints.digest([q.record() for q in qs], [q.ids for q in qs])
                for hay, qs in prompts[m].items()
            }
            for m in models
        },
    }


def compute(p: Chapter4Parameters, folder: Path, unit) -> None:
    """The unit (kvutils.studies.units.retrieval_unit): the retrieval test on one model (`unit.model`),
    written atomically."""
    started = time.time()
    name = next(m for m in retrieval_models(p) if m == unit.model or m.endswith(unit.model))
    prompts = retrieval_prompts(load_tokenizer(name), p)
    loaded = load(name, "float32", device=p.device)
    scored = retrieval.score_model(loaded, prompts)
    results.write_json_atomic(
        Path(folder) / unit.outputs[0],
        {
            "key": retrieval_key([name], p.device, {name: prompts}),
            "retrieval": {name: scored},
            "models": [loaded.describe()],
            "wall_time_s": round(time.time() - started, 2),
        },
    )
