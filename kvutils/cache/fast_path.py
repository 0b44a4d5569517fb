"""The fast path: every decoded token of a document scored by one teacher-forced forward.

Each layer's cache hands attention every version of every entry (fresh and stored; per-query
copies of re-indexed sink keys) and an explicit 4-D mask picks, per query, the versions that query
would have read (the rules are in `kvutils.cache.scoring`'s docstring).
"""
from __future__ import annotations

import contextlib

import torch

from kvutils.cache.forward import ComputedLayer, attention_masks, forward_logits
from kvutils.cache.prefilled import KV, Prefilled, prefill_for
from kvutils.models import attention
from kvutils.models.loading import Loaded
from kvutils.models.rotary import rotate_keys


def _versions(op, slots: torch.Tensor, queries: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """(held (decode, slots): the entries each query still holds; {(key stored, value stored):
    (decode, slots) visible}): the versions of an entry a query may read, key and value each fresh
    or stored (KIVI stores a value later than its key); the query's own entry is always fresh. A
    re-indexing window's earlier sinks are read through copies (`_segments`), not here."""
    before = slots[None, :] < queries[:, None]  # (decode, slots)
    own = slots[None, :] == queries[:, None]
    held = before & op.keeps(slots, queries)
    combos = {(False, False): own | held}
    if op.transforms_storage:
        key_done = op.stored_after(slots)[None, :] < queries[:, None]
        value_done = op.values_stored_after(slots)[None, :] < queries[:, None]
        combos = {(ks, vs): held & (key_done if ks else ~key_done) & (value_done if vs else ~value_done)
                  for ks in (False, True) for vs in (False, True)}
        combos[(False, False)] |= own
    if op.reindexes_positions and op.sinks > 0:
        combos[(False, False)][:, :op.sinks] &= own[:, :op.sinks]
    return held, combos


def _segments(loaded: Loaded, op, combos: dict, slots: torch.Tensor, queries: torch.Tensor,
              held: torch.Tensor) -> list:
    """Each segment: (visible (decode, n), key slots (n,), build(layer, keys, values) -> its n entries)."""
    segments = []
    for (ks, vs), visible_kv in combos.items():
        cols = visible_kv.any(0).nonzero().squeeze(1)
        if not len(cols) and (ks or vs):
            continue

        def build(i, k, v, c=cols, ks=ks, vs=vs):
            k = op.store_keys(k, slots) if ks else k
            v = op.store_values(v, slots) if vs else v
            return k[..., c, :], v[..., c, :]
        segments.append((visible_kv[:, cols], cols, build))
    if op.reindexes_positions and op.sinks > 0:
        # StreamingLLM: a query at n holding h entries sits at cache position h; the recent block
        # keeps its distances, the sinks come (n - h) positions closer: one rotated copy per query
        decode = len(queries)
        shift = queries - held.sum(1)  # (decode,)
        sink = torch.arange(op.sinks).repeat(decode)  # (decode * sinks,) query-major
        copy_visible = ((torch.arange(decode)[:, None] == torch.arange(decode).repeat_interleave(
            op.sinks)[None, :])
                        & (sink[None, :] < queries[:, None]))

        def build_sinks(i, k, v):
            return (rotate_keys(loaded, i, k[..., sink, :], shift.repeat_interleave(op.sinks)), v[..., sink,
                                                                                                  :])
        segments.append((copy_visible, sink, build_sinks))
    return segments


@torch.inference_mode()
def score_fast(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
               exact_kv: KV | Prefilled | None = None, stats: dict | None = None, decided: list | None = None,
               last: int = 0) -> torch.Tensor:
    """Logits (decode, vocab) after each of the `decode` tokens that follow the first `prefill`
    tokens of `ids` (seq,), with the cache modified by `op`: one forward for all of them.
    `exact_kv`, the exact prefill's cache, saves recomputing it for operations that start from it.
    A press's per-layer, per-head kept set is applied by `kvutils.models.attention`; `stats["held"]`
    receives it (per layer (kv_heads, prefill) bool). `decided`, a press's kept sets already decided
    from this prefill, saves deciding again; `last` > 0 returns only the last `last` rows (the
    output layer runs on those alone)."""
    if not op.has_fast_path:
        raise ValueError(f"{op.spec}: what it keeps changes with each decoded token's attention, so only the "
                         "step path scores it (path='step')")
    pre = prefill_for(loaded, op, ids, prefill, exact_kv)
    kv = pre.kv
    queries = torch.arange(prefill, prefill + decode)  # (decode,)
    slots = torch.arange(prefill + decode)  # every entry that will exist, prefill then decode
    held, combos = _versions(op, slots, queries)
    segments = _segments(loaded, op, combos, slots, queries, held)
    visible = torch.cat([s[0] for s in segments], dim=1)
    key_slots = torch.cat([s[1] for s in segments])

    def assemble_for(i, prefill_keys, prefill_values):
        def assemble(new_keys, new_values):
            k = torch.cat([prefill_keys, new_keys], dim=-2)  # (batch, kv_heads, prefill + decode, head_dim)
            v = torch.cat([prefill_values, new_values], dim=-2)
            parts = [build(i, k, v) for _, _, build in segments]
            return torch.cat([p[0] for p in parts], dim=-2), torch.cat([p[1] for p in parts], dim=-2)
        return assemble

    layers = [ComputedLayer(assemble_for(i, k, v)) for i, (k, v) in enumerate(kv)]
    masks = attention_masks(loaded, visible, queries, key_slots)
    per_head = contextlib.nullcontext()
    if op.needs_views:  # a press: each layer's KV heads keep their own prefill entries, and every new one
        kept = decided if decided is not None else op.decide(pre.views)
        if stats is not None:
            stats["held"] = kept
        full = [torch.cat([k, torch.ones(k.shape[0], decode, dtype=torch.bool)], -1) for k in kept]
        per_head = attention.session(loaded, masks={i: f[:, key_slots] for i, f in enumerate(full)})
    with per_head:
        return forward_logits(loaded, ids[None, prefill:prefill + decode], queries, masks, layers,
                              logits_to_keep=last)
