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
those it gets alone, up to rounding.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer

from kvutils.cache.forward import ComputedLayer, attention_masks, forward_logits
from kvutils.cache.prefilled import KV, Prefilled, prefill_for
from kvutils.cache.sizes import cache_object_bytes
from kvutils.models import attention
from kvutils.models.registry import Loaded
from kvutils.models.rotary import rotate_keys

STEP_BATCH = 8  # documents a caller decodes together on the step path (their caches and logits held at once)


def _held_layer(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


# --------------------------------------------------------------------------- fast path


@torch.inference_mode()
def score_fast(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
               exact_kv: KV | Prefilled | None = None, stats: dict | None = None) -> torch.Tensor:
    """Logits (decode, vocab) after each of the `decode` tokens that follow the first `prefill`
    tokens of `ids` (seq,), with the cache modified by `op`: one forward for all of them.
    `exact_kv`, the exact prefill's cache, saves recomputing it for operations that start from it.
    A press's per-layer, per-head kept set is applied by `kvutils.models.attention`; `stats["held"]`
    receives it (per layer (kv_heads, prefill) bool)."""
    if not op.has_fast_path:
        raise ValueError(f"{op.spec}: what it keeps changes with each decoded token's attention, so only the "
                         "step path scores it (path='step')")
    pre = prefill_for(loaded, op, ids, prefill, exact_kv)
    kv = pre.kv
    queries = torch.arange(prefill, prefill + decode)  # (decode,)
    slots = torch.arange(prefill + decode)  # every entry that will exist, prefill then decode
    before = slots[None, :] < queries[:, None]  # (decode, slots)
    own = slots[None, :] == queries[:, None]
    held = before & op.keeps(slots, queries)
    # versions of an entry a query may read: key and value each fresh or stored (KIVI stores a
    # value later than its key); the query's own entry is always fresh
    combos = {(False, False): own | held}
    if op.transforms_storage:
        key_done = op.stored_after(slots)[None, :] < queries[:, None]
        value_done = op.values_stored_after(slots)[None, :] < queries[:, None]
        combos = {(ks, vs): held & (key_done if ks else ~key_done) & (value_done if vs else ~value_done)
                  for ks in (False, True) for vs in (False, True)}
        combos[(False, False)] |= own
    fresh_visible = combos[(False, False)]
    reindexed_sinks = getattr(op, "reindex", False) and op.sinks > 0
    if reindexed_sinks:
        fresh_visible[:, :op.sinks] &= own[:, :op.sinks]  # earlier sinks are read through copies, below

    # each segment: (visible (decode, n), key slots (n,), build(layer, keys, values) -> n entries)
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
    per_head = contextlib.nullcontext()
    if op.needs_views:  # a press: each layer's KV heads keep their own prefill entries, and every new one
        kept = op.decide(pre.views)
        if stats is not None:
            stats["held"] = kept
        full = [torch.cat([k, torch.ones(k.shape[0], decode, dtype=torch.bool)], -1) for k in kept]
        per_head = attention.session(loaded, masks={i: f[:, key_slots] for i, f in enumerate(full)})
    with per_head:
        return forward_logits(loaded, ids[None, prefill:prefill + decode], queries, masks, layers)


# --------------------------------------------------------------------------- step-by-step reference


class _Held:
    """One layer's cache as the operation keeps it: entries in slot (document position) order."""

    def __init__(self, keys, values, slots):
        self.keys, self.values, self.slots = keys.clone(), values.clone(), slots  # written in place below
        self.coords = slots.clone()  # the rotary position each key carries
        self.stored = torch.zeros(len(slots), dtype=torch.bool)  # the key in stored form
        self.stored_v = torch.zeros(len(slots), dtype=torch.bool)  # the value in stored form

    def extend(self, keys, values, slot: int, coord: int):
        """Take the layer's keys/values after the forward: the held ones plus the new entry."""
        self.keys, self.values = keys, values
        self.slots = torch.cat([self.slots, torch.tensor([slot])])
        self.coords = torch.cat([self.coords, torch.tensor([coord])])
        self.stored = torch.cat([self.stored, torch.tensor([False])])
        self.stored_v = torch.cat([self.stored_v, torch.tensor([False])])

    def settle(self, loaded: Loaded, layer_idx: int, op, next_query: int):
        """Apply the operation before the query at `next_query`: evict, re-index, store."""
        keep = op.keeps(self.slots, torch.tensor([next_query]))[0]
        if not keep.all():
            self.keys, self.values = self.keys[..., keep, :], self.values[..., keep, :]
            self.slots, self.coords = self.slots[keep], self.coords[keep]
            self.stored, self.stored_v = self.stored[keep], self.stored_v[keep]
        if getattr(op, "reindex", False):
            target = torch.arange(len(self.slots))
            if not torch.equal(target, self.coords):
                self.keys = rotate_keys(loaded, layer_idx, self.keys, target - self.coords)
                self.coords = target
        if op.transforms_storage:
            due = (~self.stored & (op.stored_after(self.slots) < next_query)).nonzero().squeeze(1)
            if len(due):
                self.keys[..., due, :] = op.store_keys(self.keys[..., due, :], self.slots[due])
                self.stored[due] = True
            due = (~self.stored_v & (op.values_stored_after(self.slots) < next_query)).nonzero().squeeze(1)
            if len(due):
                self.values[..., due, :] = op.store_values(self.values[..., due, :], self.slots[due])
                self.stored_v[due] = True


@torch.inference_mode()
def score_step(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
               exact_kv: KV | Prefilled | None = None, stats: dict | None = None) -> torch.Tensor:
    """The reference for `score_fast`: one forward per decode token against the cache as the
    operation holds it, applying the operation after every token. Returns (decode, vocab).
    Data-dependent methods: `stats["held"]` (per layer (kv_heads, prefill) bool, what is held
    after the prefill) or, for a transformers cache object, `stats["cache_bytes"]`."""
    return score_step_many(loaded, op, ids[None], prefill, decode, [exact_kv], [stats])[0]


def _score_held_step(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int, exact_kv) -> torch.Tensor:
    """`score_step` for an operation that decides from positions alone (a window, a quantiser, a
    chunk): one document, the cache held literally as the operation keeps it."""
    kv = prefill_for(loaded, op, ids, prefill, exact_kv).kv
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
        logits.append(forward_logits(loaded, ids[None, n:n + 1], torch.tensor([coord]), masks, layers)[-1])
        for i, (state, layer) in enumerate(zip(states, layers)):
            state.extend(layer.keys, layer.values, n, coord)
            state.settle(loaded, i, op, n + 1)
    return torch.stack(logits)


# --------------------------------------------------------------------------- the step path, documents batched


@dataclass
class StepStart:
    """One document's start on the batched step path: its prefill's cache and what the operation
    decided from it (a press's kept sets, a policy's per-layer states, or a filled cache object)."""

    kv: KV
    held: list[torch.Tensor] | None = None  # per layer (kv_heads, prefill) bool
    states: list[dict] | None = None  # a decode-time policy's, per layer
    cache: Cache | None = None  # a transformers cache object holding the prefill


def batched_step(op) -> bool:
    """Whether `score_step_many` decodes `op`'s documents together (presses, decode-time policies
    and transformers' cache objects); other operations are scored one document at a time."""
    return hasattr(op, "make_cache") or op.needs_views


def step_start(loaded: Loaded, op, ids: torch.Tensor, prefill: int, exact_kv: KV | Prefilled | None = None,
               stats: dict | None = None) -> StepStart:
    """What the step path starts from for one document `ids` (seq,); fills `stats` as `score_step`
    does. Holds no layer views, so many documents' starts fit where their views would not."""
    pre = prefill_for(loaded, op, ids, prefill, exact_kv)
    if hasattr(op, "make_cache"):
        cache = op.make_cache(loaded.model.config)
        for i, (k, v) in enumerate(pre.kv):
            cache.update(k, v, i)
        if stats is not None:
            stats["cache_bytes"] = cache_object_bytes(cache)
        return StepStart(pre.kv, cache=cache)
    states = [op.start(v) for v in pre.views] if hasattr(op, "step") else None
    held = [s["held"] for s in states] if states is not None else op.decide(pre.views)
    if stats is not None:
        stats["held"] = [h.clone() for h in held]
    return StepStart(pre.kv, held, states)


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
        return torch.stack([_score_held_step(loaded, op, ids[d], prefill, decode, prefilled[d]) for d in range(docs)])
    starts = [p if isinstance(p, StepStart) else step_start(loaded, op, ids[d], prefill, p, stats[d])
              for d, p in enumerate(prefilled)]
    tokens = ids[:, prefill:prefill + decode]  # (docs, decode)
    if hasattr(op, "make_cache"):
        return _cache_object_steps(loaded, tokens, prefill, starts)
    return _masked_steps(loaded, op, tokens, prefill, starts)


class GrowingLayer(DynamicLayer):
    """A cache layer with room for `room` more entries after `keys`/`values` (batch, kv_heads, P,
    head_dim): `update` writes each new entry in place instead of copying the held ones."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, room: int):
        super().__init__()
        self.lazy_initialization(keys, values)
        b, h, P, d = keys.shape
        self.buffer_k = keys.new_empty(b, h, P + room, d)
        self.buffer_v = values.new_empty(b, h, P + room, values.shape[-1])
        self.buffer_k[..., :P, :], self.buffer_v[..., :P, :] = keys, values
        self.length = P
        self.keys, self.values = self.buffer_k[..., :P, :], self.buffer_v[..., :P, :]

    def update(self, key_states, value_states, *args, **kwargs):
        end = self.length + key_states.shape[-2]
        self.buffer_k[..., self.length:end, :], self.buffer_v[..., self.length:end, :] = key_states, value_states
        self.length = end
        self.keys, self.values = self.buffer_k[..., :end, :], self.buffer_v[..., :end, :]
        return self.keys, self.values


def _next_logits(loaded: Loaded, tokens: torch.Tensor, position: int, masks, cache: Cache) -> torch.Tensor:
    """One cached forward of one token per document, tokens (docs, 1) at `position`: (docs, vocab)."""
    positions = torch.full(tokens.shape, position, device=loaded.device)
    out = loaded.model(input_ids=tokens.to(loaded.device), position_ids=positions, attention_mask=masks,
                       cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def _write_step(out: torch.Tensor | None, j: int, decode: int, logits: torch.Tensor) -> torch.Tensor:
    """Row j of the (docs, decode, vocab) result, allocated at the first step (no copy at the end)."""
    if out is None:
        out = logits.new_empty(logits.shape[0], decode, logits.shape[-1])
    out[:, j] = logits
    return out


def _masked_steps(loaded: Loaded, op, tokens: torch.Tensor, prefill: int, starts: list[StepStart]) -> torch.Tensor:
    """Presses and decode-time policies, one token per forward: every entry stays in the layer's
    tensors and what a KV head no longer holds is masked out for it (the same softmax as removing
    it). A policy sees each query's attention weights and updates what is held after it."""
    decode = tokens.shape[1]
    n_layers = len(starts[0].kv)
    kv = [(torch.cat([s.kv[i][0] for s in starts]), torch.cat([s.kv[i][1] for s in starts])) for i in range(n_layers)]
    cache = Cache(layers=[GrowingLayer(k, v, decode) for k, v in kv])  # (docs, kv_heads, P + decode, head_dim)
    policy = hasattr(op, "step")
    if policy:
        states = [op.stack([s.states[i] for s in starts]) for i in range(n_layers)]
        held = [state["held"] for state in states]
    else:
        held = [torch.stack([s.held[i] for s in starts]) for i in range(n_layers)]  # (docs, kv_heads, P)
    seen = {}
    record = (lambda layer, q, k, v, weights, scale: seen.__setitem__(layer, weights)) if policy else None
    logits = None
    with attention.session(loaded, record=record) as session:
        for j in range(decode):
            n = prefill + j
            for i, h in enumerate(held):  # the new entry is held by every head; (docs, kv_heads, 1, n + 1)
                session.masks[i] = torch.cat([h, h.new_ones(*h.shape[:-1], 1)], -1)[:, :, None]
            visible = attention_masks(loaded, torch.ones(1, n + 1, dtype=torch.bool), torch.tensor([n]),
                                      torch.arange(n + 1))
            logits = _write_step(logits, j, decode, _next_logits(loaded, tokens[:, j:j + 1], n, visible, cache))
            if policy:
                held = [op.step_many(state, seen[i]())["held"] for i, state in enumerate(states)]
            else:
                held = [m[:, :, 0] for m in session.masks.values()]
    return logits  # (docs, decode, vocab)


def _joined_cache(loaded: Loaded, starts: list[StepStart]) -> Cache | None:
    """One cache object for all documents' starts, each document keeping its own per-tensor fp8
    scale (the per-document caches' quantised entries and scales, stacked on the batch); None for
    other backends (their grouped storage is not joined here)."""
    from transformers.cache_utils import Fp8QuantizedLayer

    if len(starts) == 1:
        return starts[0].cache
    if not all(isinstance(layer, Fp8QuantizedLayer) for s in starts for layer in s.cache.layers):
        return None
    joined = copy.deepcopy(starts[0].cache)
    for i, layer in enumerate(joined.layers):
        parts = [s.cache.layers[i] for s in starts]
        for name in ("_quantized_keys", "_quantized_values"):
            stored = [getattr(p, name) for p in parts]  # (quantised (1, kv_heads, P, head_dim), scale ())
            setattr(layer, name, (torch.cat([q for q, _ in stored]), torch.stack([s for _, s in stored]).view(-1, 1, 1, 1)))
    return joined


def _cache_object_steps(loaded: Loaded, tokens: torch.Tensor, prefill: int, starts: list[StepStart]) -> torch.Tensor:
    """A transformers cache object (e.g. QuantizedCache) as the model uses it: filled with the
    exact prefill through its own `update`, then one cached forward per decoded token, all
    documents in one batch where their caches can be joined."""
    joined = _joined_cache(loaded, starts)
    groups = [(tokens, joined)] if joined is not None else [(tokens[d:d + 1], s.cache) for d, s in enumerate(starts)]
    out = []
    for rows, cache in groups:
        logits = None
        for j in range(rows.shape[1]):
            logits = _write_step(logits, j, rows.shape[1], _next_logits(loaded, rows[:, j:j + 1], prefill + j, None, cache))
        out.append(logits)
    return out[0] if len(out) == 1 else torch.cat(out)  # (docs, decode, vocab)


PATHS = {"fast": score_fast, "step": score_step}
