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

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from . import attention
from .models import Loaded
from .rotary import rotary_cos_sin, rotate_keys

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (1, kv_heads, seq, head_dim)


@dataclass
class LayerView:
    """One layer's prefill as a data-dependent method sees it (kvpress's `score` arguments).
    keys/values (1, kv_heads, P, head_dim); queries (1, heads, P, head_dim) after the rotary
    embedding; `weights()` the prefill's attention weights (1, heads, P, P) under the model's own
    mask; `rotary(positions)` the layer's (cos, sin), (1, n, rotary_dim); `scale` its softmax scale."""

    layer: int
    n_layers: int
    keys: torch.Tensor
    values: torch.Tensor
    queries: torch.Tensor
    scale: float
    weights: Callable[[], torch.Tensor]
    rotary: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

    @property
    def groups(self) -> int:
        return self.queries.shape[1] // self.keys.shape[1]

    def per_kv_head(self, scores: torch.Tensor) -> torch.Tensor:
        """(heads, n) -> (kv_heads, n): the mean over each KV head's query group (kvpress's choice,
        SnapKV issue 22)."""
        return scores.view(self.keys.shape[1], self.groups, -1).mean(1)


@dataclass
class Prefilled:
    """The exact prefill's cache, and (for data-dependent methods) what each layer saw."""

    kv: KV
    views: list[LayerView] | None = None


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


@torch.inference_mode()
def exact_prefill(loaded: Loaded, ids: torch.Tensor, views: bool = False) -> Prefilled:
    """`kv_forward` of `ids` (1, seq), and with `views` each layer's queries and attention too."""
    if not views:
        return Prefilled(kv_forward(loaded, ids))
    seen = {}

    def record(layer, query, key, value, weights, scale):
        seen[layer] = (query, weights, scale)

    with attention.session(loaded, record=record):
        kv = kv_forward(loaded, ids)
    out = []
    for i, (k, v) in enumerate(kv):
        query, weights, scale = seen[i]
        out.append(LayerView(i, len(kv), k, v, query, scale, weights,
                             lambda positions, i=i, like=k: rotary_cos_sin(loaded, i, like, positions)))
    return Prefilled(kv, out)


def _prefilled(loaded: Loaded, op, ids: torch.Tensor, prefill: int, exact_kv) -> Prefilled:
    """The cache the operation starts from; `exact_kv` (a KV list or a Prefilled) is the shared
    exact prefill, reused where the operation starts from it."""
    if isinstance(exact_kv, list):
        exact_kv = Prefilled(exact_kv)
    if not op.exact_prefill:
        return Prefilled(op.prefill(loaded, ids[None, :prefill]))
    if exact_kv is not None and (exact_kv.views is not None or not op.needs_views):
        return exact_kv
    return exact_prefill(loaded, ids[None, :prefill], views=op.needs_views)


# --------------------------------------------------------------------------- fast path


@torch.inference_mode()
def score_fast(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
               exact_kv: KV | Prefilled | None = None, stats: dict | None = None) -> torch.Tensor:
    """Logits (decode, vocab) after each of the `decode` tokens that follow the first `prefill`
    tokens of `ids` (seq,), with the cache modified by `op`: one forward for all of them.
    `exact_kv`, the exact prefill's cache, saves recomputing it for operations that start from it.
    A press's per-layer, per-head kept set is applied by `kvutils.attention`; `stats["held"]`
    receives it (per layer (kv_heads, prefill) bool)."""
    if not op.has_fast_path:
        raise ValueError(f"{op.spec}: what it keeps changes with each decoded token's attention, so only the "
                         "step path scores it (path='step')")
    pre = _prefilled(loaded, op, ids, prefill, exact_kv)
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
        return _run(loaded, ids[None, prefill:prefill + decode], queries, masks, layers)


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
    if hasattr(op, "make_cache"):
        return _score_cache_object(loaded, op, ids, prefill, decode, _prefilled(loaded, op, ids, prefill, exact_kv), stats)
    if op.needs_views:
        return _score_masked_step(loaded, op, ids, prefill, decode, _prefilled(loaded, op, ids, prefill, exact_kv), stats)
    kv = _prefilled(loaded, op, ids, prefill, exact_kv).kv
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


def _score_masked_step(loaded: Loaded, op, ids, prefill: int, decode: int, pre: Prefilled, stats) -> torch.Tensor:
    """Presses and decode-time policies, one token per forward: every entry stays in the layer's
    tensors and what a KV head no longer holds is masked out for it (the same softmax as removing
    it). A policy sees each query's attention weights and updates what is held after it."""
    policy = hasattr(op, "step")
    if policy:
        states = [op.start(v) for v in pre.views]
        held = [s["held"] for s in states]
    else:
        held = op.decide(pre.views)
    if stats is not None:
        stats["held"] = [h.clone() for h in held]
    layers = [_held_layer(k, v) for k, v in pre.kv]
    logits = []
    for n in range(prefill, prefill + decode):
        seen = {}
        masks = {i: torch.cat([h, torch.ones(h.shape[0], 1, dtype=torch.bool)], -1) for i, h in enumerate(held)}
        visible = attention_masks(loaded, torch.ones(1, n + 1, dtype=torch.bool), torch.tensor([n]), torch.arange(n + 1))
        record = (lambda layer, q, k, v, weights, scale: seen.__setitem__(layer, weights)) if policy else None
        with attention.session(loaded, masks=masks, record=record):
            logits.append(_run(loaded, ids[None, n:n + 1], torch.tensor([n]), visible, layers)[-1])
        if policy:
            held = [op.step(state, seen[i]())["held"] for i, state in enumerate(states)]
        else:
            held = list(masks.values())
    return torch.stack(logits)


def _score_cache_object(loaded: Loaded, op, ids, prefill: int, decode: int, pre: Prefilled, stats) -> torch.Tensor:
    """A transformers cache object (e.g. QuantizedCache) as the model uses it: filled with the
    exact prefill through its own `update`, then one cached forward per decoded token."""
    from .hf_caches import cache_object_bytes

    cache = op.make_cache(loaded.model.config)
    for i, (k, v) in enumerate(pre.kv):
        cache.update(k, v, i)
    if stats is not None:
        stats["cache_bytes"] = cache_object_bytes(cache)
    logits = []
    for n in range(prefill, prefill + decode):
        out = loaded.model(input_ids=ids[None, n:n + 1].to(loaded.device),
                           position_ids=torch.tensor([[n]], device=loaded.device), cache=cache, use_cache=True)
        logits.append(out.logits[0, -1])
    return torch.stack(logits)


PATHS = {"fast": score_fast, "step": score_step}
