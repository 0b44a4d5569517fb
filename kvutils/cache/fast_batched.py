"""The fast path for several presses on one prefill: one batched forward, one batch row per press.

Prefill-time presses (`kvutils.cache.methods.press`) keep the exact prefill's entries, unchanged and
at their own positions, and differ only in which of them each KV head keeps. So every press reads
the same keys and values, and its kept sets become its batch row's per-head visibility
(`kvutils.models.attention`). Each row's logits are what `score_fast` gives that press alone, up to
rounding (a test holds them equal on every model family); one forward of B rows costs much less
than B forwards of one on a CPU, where a forward of a few dozen tokens is bound by reading the
weights.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import Cache

from kvutils.cache.base import PRESS
from kvutils.cache.forward import ComputedLayer, attention_masks
from kvutils.cache.prefilled import Prefilled
from kvutils.models import attention
from kvutils.models.loading import Loaded

PRESS_BATCH = 8  # presses per forward: each row holds its own copy of every layer's keys and values


def batchable(op) -> bool:
    """A press scored by one forward from the exact prefill, storing entries as computed, never
    re-rotating them: what `score_presses` scores."""
    return (op.kind == PRESS and op.has_fast_path and op.exact_prefill and not op.transforms_storage
            and not op.reindexes_positions)


def _chunk(loaded: Loaded, ids: torch.Tensor, prefill: int, decode: int, pre: Prefilled, kept: list,
           last: int):
    rows = len(kept)
    queries = torch.arange(prefill, prefill + decode)  # (decode,)
    slots = torch.arange(prefill + decode)  # the prefill's entries, then the decoded ones
    masks = attention_masks(loaded, slots[None, :] <= queries[:, None], queries, slots)

    def assemble_for(prefill_keys, prefill_values):
        def assemble(new_keys, new_values):  # (rows, kv_heads, decode, head_dim)
            # (rows, kv_heads, slots, head_dim)
            keys = torch.cat([prefill_keys.expand(rows, -1, -1, -1), new_keys], dim=-2)
            return keys, torch.cat([prefill_values.expand(rows, -1, -1, -1), new_values], dim=-2)
        return assemble

    layers = [ComputedLayer(assemble_for(k, v)) for k, v in pre.kv]
    # layer -> (rows, kv_heads, 1, slots): each row's kept prefill entries, and every decoded one
    per_head = {}
    for i in range(len(pre.kv)):
        held = torch.stack([k[i] for k in kept])  # (rows, kv_heads, prefill)
        per_head[i] = torch.cat([held, held.new_ones(*held.shape[:-1], decode)], -1)[:, :, None]
    tokens = ids[prefill:prefill + decode].expand(rows, -1)  # (rows, decode)
    with attention.session(loaded, masks=per_head):
        out = loaded.model(input_ids=tokens.to(loaded.device),
                           position_ids=queries.expand(rows, -1).to(loaded.device),
                           attention_mask=masks, cache=Cache(layers=layers), use_cache=True,
                           logits_to_keep=last)
    return out.logits  # (rows, last or decode, vocab)


@torch.inference_mode()
def score_presses(loaded: Loaded, ids: torch.Tensor, prefill: int, decode: int, pre: Prefilled,
                  kept: list[list[torch.Tensor]], last: int = 0) -> torch.Tensor:
    """Logits (presses, last or decode, vocab): row b is what `score_fast(loaded, op, ids, prefill,
    decode, pre, decided=kept[b], last=last)` returns for the press `op` whose kept sets on this
    prefill are `kept[b]` (per layer (kv_heads, prefill) bool). `pre` is the exact prefill of the
    first `prefill` tokens of `ids` (seq,); PRESS_BATCH presses per forward."""
    return torch.cat([_chunk(loaded, ids, prefill, decode, pre, kept[s:s + PRESS_BATCH], last)
                      for s in range(0, len(kept), PRESS_BATCH)])
