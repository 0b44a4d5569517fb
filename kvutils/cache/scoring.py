"""Teacher-forced scoring with a modified KV cache: one fast forward, and a step-by-step reference.

A document's first `prefill` tokens are run once and their cache is handed to a cache operation
(`kvutils.cache.base`; the methods are in `kvutils.cache.methods`); then the next `decode` tokens
are fed (teacher forcing, the document's own tokens rather than the model's choices), and the
logits after each fed token are returned.

What a query at position n reads, in both paths (the operation supplies three rules):
- its own key/value, fresh, always;
- every earlier entry the operation still holds (`op.keeps(slots, n)`, e.g. a window's sinks and
  most recent tokens): in stored form (`op.store`, e.g. quantised) once the entry's storage group
  is complete (`op.stored_after(slot) < n`), fresh before that (KIVI's full-precision residual);
- with `reindex` (StreamingLLM), keys rotated to their index in the held cache, and the query to
  the number of entries held.
Gemma 3's sliding layers additionally see only the last `sliding_window` document positions.

The step path does this literally: one token per forward, the new entry appended, then evicted,
stored or re-rotated as the operation says. The fast path runs all `decode` tokens in one forward:
each layer's cache hands attention every version of every entry (fresh and stored; per-query
copies of re-indexed sink keys) and an explicit 4-D mask picks, per query, the versions that query
would have read. Attention itself stays the model's; tests hold the two paths equal.
`score_step_many` takes the step path for several documents of one prefill length at once (one
batched forward per decoded token) where the operation decides per document from attention
(presses, decode-time policies) or is a transformers cache object; each document's logits are
those it gets alone, up to rounding. The paths are in `fast_path`, `step_path` (one document, an
operation that decides from positions alone) and `step_batched`; this module chooses between them.
"""
from __future__ import annotations

import torch

from kvutils.cache.base import CACHE_OBJECT
from kvutils.cache.fast_path import score_fast
from kvutils.cache.prefilled import KV, Prefilled
from kvutils.cache.step_batched import StepStart, batched_step, cache_object_steps, masked_steps, step_start
from kvutils.cache.step_path import score_held_step
from kvutils.models.loading import Loaded

STEP_BATCH = 8  # documents a caller decodes together on the step path (their caches and logits held at once)


@torch.inference_mode()
def score_step(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
               exact_kv: KV | Prefilled | None = None, stats: dict | None = None) -> torch.Tensor:
    """The reference for `score_fast`: one forward per decode token against the cache as the
    operation holds it, applying the operation after every token. Returns (decode, vocab).
    Data-dependent methods: `stats["held"]` (per layer (kv_heads, prefill) bool, what is held
    after the prefill) or, for a transformers cache object, `stats["cache_bytes"]`."""
    return score_step_many(loaded, op, ids[None], prefill, decode, [exact_kv], [stats])[0]


@torch.inference_mode()
def score_step_many(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
                    prefilled: list | None = None, stats: list[dict] | None = None) -> torch.Tensor:
    """`score_step` for several documents `ids` (docs, seq) of one prefill length, so their
    positions line up: one batched forward per decoded token for all of them. `prefilled[d]` is
    document d's `StepStart` (its stats were filled when it was made), exact prefill (Prefilled or
    KV) or None; `stats[d]` receives its stats. Returns (docs, decode, vocab): each document's rows
    are what `score_step` gives it alone, up to rounding."""
    docs = ids.shape[0]
    prefilled = [None] * docs if prefilled is None else prefilled
    stats = [None] * docs if stats is None else stats
    if not batched_step(op):
        return torch.stack([score_held_step(loaded, op, ids[d], prefill, decode,
                                            prefilled[d]) for d in range(docs)])
    starts = [p if isinstance(p, StepStart) else step_start(loaded, op, ids[d], prefill, p, stats[d])
              for d, p in enumerate(prefilled)]
    tokens = ids[:, prefill:prefill + decode]  # (docs, decode)
    if op.kind == CACHE_OBJECT:
        return cache_object_steps(loaded, tokens, prefill, starts)
    return masked_steps(loaded, op, tokens, prefill, starts)


PATHS = {"fast": score_fast, "step": score_step}
