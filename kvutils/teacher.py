"""Teacher-forced scoring with a modified KV cache: one fast forward, and a step-by-step reference.

A document's first `prefill` tokens are run once and their cache is handed to a cache operation
(`kvutils.cache`); then the next `decode` tokens are fed (teacher forcing, the document's own
tokens rather than the model's choices), and the logits after each fed token are returned.

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
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from .models import Loaded
from .rotary import rotate_keys

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (1, kv_heads, seq, head_dim)


def attention_masks(loaded: Loaded, visible: torch.Tensor, query_slots: torch.Tensor,
                    key_slots: torch.Tensor):
    """The `attention_mask` argument for a forward whose queries at document positions
    `query_slots` (q,) may read the keys at `key_slots` (k,) where `visible` (q, k) is True.
    Adds the model's own sliding window (by document position) for sliding layers. Returns one
    additive (1, 1, q, k) mask, or a dict per layer type, which is what the models take."""
    config = loaded.config
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    if kinds - {"full_attention", "sliding_attention"}:
        raise ValueError(f"{loaded.name}: layer types {sorted(kinds)} are not supported")
    blocked = torch.finfo(loaded.dtype).min

    def additive(allowed: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(allowed.shape, dtype=loaded.dtype)
        return mask.masked_fill(~allowed, blocked)[None, None].to(loaded.device)

    if "sliding_attention" not in kinds:
        return additive(visible)
    near = (query_slots[:, None] - key_slots[None, :]) < config.sliding_window
    return {"full_attention": additive(visible), "sliding_attention": additive(visible & near)}


class ComputedLayer(DynamicLayer):
    """A cache layer whose `update` hands attention a computed key/value set instead of appending:
    `assemble(new_keys, new_values) -> (keys, values)`. Lets one forward read, per query, different
    versions of the same entry (selected by a 4-D mask)."""

    def __init__(self, assemble: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]):
        super().__init__()
        self.assemble = assemble

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.keys, self.values = self.assemble(key_states, value_states)
        return self.keys, self.values


def _held_layer(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


def _run(loaded: Loaded, ids: torch.Tensor, positions: torch.Tensor, masks, layers: list,
         logits_to_keep: int = 0) -> torch.Tensor:
    out = loaded.model(input_ids=ids.to(loaded.device), position_ids=positions.view(1, -1).to(loaded.device),
                       attention_mask=masks, cache=Cache(layers=layers), use_cache=True,
                       logits_to_keep=logits_to_keep)
    return out.logits[0]  # (kept positions, vocab)


@torch.inference_mode()
def kv_forward(loaded: Loaded, ids: torch.Tensor, positions: torch.Tensor | None = None) -> KV:
    """Every layer's K/V for `ids` (1, seq) run with no past, at `positions` (default 0..seq-1).
    Sliding layers keep every entry too (their window is applied by the masks), so all layers are
    indexed alike by document position."""
    seq = ids.shape[-1]
    positions = torch.arange(seq) if positions is None else positions
    slots = torch.arange(seq)
    masks = attention_masks(loaded, slots[None, :] <= slots[:, None], slots, slots)
    cache = DynamicCache()
    loaded.model(input_ids=ids.to(loaded.device), position_ids=positions.view(1, -1).to(loaded.device),
                 attention_mask=masks, cache=cache, use_cache=True, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in cache.layers]


@torch.inference_mode()
def recompute_selected(loaded: Loaded, ids: torch.Tensor, kv: KV, selected: torch.Tensor) -> KV:
    """CacheBlend's partial prefill: the tokens at `selected` (sorted document positions) are run
    again, reading the cache `kv` (all positions of `ids` (1, seq)) in which each layer's entries
    for those tokens are replaced by the recomputed ones before attention reads them. Returns the
    blended cache. With every position selected this is an ordinary in-context prefill."""
    slots = torch.arange(ids.shape[-1])

    def assemble_into(keys, values):
        def assemble(new_keys, new_values):
            keys_out, values_out = keys.clone(), values.clone()
            keys_out[..., selected, :], values_out[..., selected, :] = new_keys, new_values
            return keys_out, values_out
        return assemble

    layers = [ComputedLayer(assemble_into(k, v)) for k, v in kv]
    masks = attention_masks(loaded, slots[None, :] <= selected[:, None], selected, slots)
    _run(loaded, ids[:, selected], selected, masks, layers, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in layers]


def _prefilled(loaded: Loaded, op, ids: torch.Tensor, prefill: int, exact_kv: KV | None) -> KV:
    if exact_kv is not None and op.exact_prefill:
        return exact_kv
    return op.prefill(loaded, ids[None, :prefill])


# --------------------------------------------------------------------------- fast path


@torch.inference_mode()
def score_fast(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
               exact_kv: KV | None = None) -> torch.Tensor:
    """Logits (decode, vocab) after each of the `decode` tokens that follow the first `prefill`
    tokens of `ids` (seq,), with the cache modified by `op`: one forward for all of them.
    `exact_kv`, the exact prefill's cache, saves recomputing it for operations that start from it."""
    kv = _prefilled(loaded, op, ids, prefill, exact_kv)
    queries = torch.arange(prefill, prefill + decode)  # (decode,)
    slots = torch.arange(prefill + decode)  # every entry that will exist, prefill then decode
    before = slots[None, :] < queries[:, None]  # (decode, slots)
    own = slots[None, :] == queries[:, None]
    held = before & op.keeps(slots, queries)
    if op.transforms_storage:
        done = op.stored_after(slots)[None, :] < queries[:, None]
        fresh_visible, stored_visible = own | (held & ~done), held & done
    else:
        fresh_visible, stored_visible = own | held, None
    reindexed_sinks = getattr(op, "reindex", False) and op.sinks > 0
    if reindexed_sinks:
        fresh_visible[:, :op.sinks] &= own[:, :op.sinks]  # earlier sinks are read through copies, below

    # each segment: (visible (decode, n), key slots (n,), build(layer, keys, values) -> n entries)
    segments = []
    cols = fresh_visible.any(0).nonzero().squeeze(1)
    segments.append((fresh_visible[:, cols], cols, lambda i, k, v, c=cols: (k[..., c, :], v[..., c, :])))
    if stored_visible is not None:
        cols_s = stored_visible.any(0).nonzero().squeeze(1)

        def build_stored(i, k, v, c=cols_s):
            k, v = op.store(k, v, slots)
            return k[..., c, :], v[..., c, :]
        segments.append((stored_visible[:, cols_s], cols_s, build_stored))
    if reindexed_sinks:
        # StreamingLLM: a query at n holding h entries sits at cache position h; the recent block
        # keeps its distances, the sinks come (n - h) positions closer: one rotated copy per query
        shift = queries - held.sum(1)  # (decode,)
        sink = torch.arange(op.sinks).repeat(decode)  # (decode * sinks,) query-major
        copy_visible = ((torch.arange(decode)[:, None] == torch.arange(decode).repeat_interleave(op.sinks)[None, :])
                        & (sink[None, :] < queries[:, None]))

        def build_sinks(i, k, v):
            return (rotate_keys(loaded, i, k[..., sink, :], shift.repeat_interleave(op.sinks)), v[..., sink, :])
        segments.append((copy_visible, sink, build_sinks))

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
    return _run(loaded, ids[None, prefill:prefill + decode], queries, masks, layers)


# --------------------------------------------------------------------------- step-by-step reference


class _Held:
    """One layer's cache as the operation keeps it: entries in slot (document position) order."""

    def __init__(self, keys, values, slots):
        self.keys, self.values, self.slots = keys.clone(), values.clone(), slots  # written in place below
        self.coords = slots.clone()  # the rotary position each key carries
        self.stored = torch.zeros(len(slots), dtype=torch.bool)

    def extend(self, keys, values, slot: int, coord: int):
        """Take the layer's keys/values after the forward: the held ones plus the new entry."""
        self.keys, self.values = keys, values
        self.slots = torch.cat([self.slots, torch.tensor([slot])])
        self.coords = torch.cat([self.coords, torch.tensor([coord])])
        self.stored = torch.cat([self.stored, torch.tensor([False])])

    def settle(self, loaded: Loaded, layer_idx: int, op, next_query: int):
        """Apply the operation before the query at `next_query`: evict, re-index, store."""
        keep = op.keeps(self.slots, torch.tensor([next_query]))[0]
        if not keep.all():
            self.keys, self.values = self.keys[..., keep, :], self.values[..., keep, :]
            self.slots, self.coords, self.stored = self.slots[keep], self.coords[keep], self.stored[keep]
        if getattr(op, "reindex", False):
            target = torch.arange(len(self.slots))
            if not torch.equal(target, self.coords):
                self.keys = rotate_keys(loaded, layer_idx, self.keys, target - self.coords)
                self.coords = target
        if op.transforms_storage:
            due = (~self.stored & (op.stored_after(self.slots) < next_query)).nonzero().squeeze(1)
            if len(due):
                k, v = op.store(self.keys[..., due, :], self.values[..., due, :], self.slots[due])
                self.keys[..., due, :], self.values[..., due, :] = k, v
                self.stored[due] = True


@torch.inference_mode()
def score_step(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
               exact_kv: KV | None = None) -> torch.Tensor:
    """The reference for `score_fast`: one forward per decode token against the cache as the
    operation holds it, applying the operation after every token. Returns (decode, vocab)."""
    kv = _prefilled(loaded, op, ids, prefill, exact_kv)
    states = [_Held(k, v, torch.arange(prefill)) for k, v in kv]
    for i, state in enumerate(states):
        state.settle(loaded, i, op, prefill)
    logits = []
    for n in range(prefill, prefill + decode):
        layers = [_held_layer(s.keys, s.values) for s in states]
        held = len(states[0].slots)
        coord = held if getattr(op, "reindex", False) else n
        key_slots = torch.cat([states[0].slots, torch.tensor([n])])
        masks = attention_masks(loaded, torch.ones(1, held + 1, dtype=torch.bool), torch.tensor([n]), key_slots)
        logits.append(_run(loaded, ids[None, n:n + 1], torch.tensor([coord]), masks, layers)[-1])
        for i, (state, layer) in enumerate(zip(states, layers)):
            state.extend(layer.keys, layer.values, n, coord)
            state.settle(loaded, i, op, n + 1)
    return torch.stack(logits)


PATHS = {"fast": score_fast, "step": score_step}
