"""The step path with several documents of one prefill length decoded together, one batched forward
per token, for the operations that decide per document from attention (presses, decode-time
policies) or are a transformers cache object. Each document's logits are those it gets alone, up
to rounding.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer

from kvutils.cache.base import CACHE_OBJECT, POLICY, STORAGE
from kvutils.cache.forward import attention_masks
from kvutils.cache.prefilled import KV, Prefilled, prefill_for
from kvutils.cache.sizes import cache_object_bytes
from kvutils.models import attention
from kvutils.models.loading import Loaded


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
    return op.kind != STORAGE


def step_start(loaded: Loaded, op, ids: torch.Tensor, prefill: int, exact_kv: KV | Prefilled | None = None,
               stats: dict | None = None) -> StepStart:
    """What the step path starts from for one document `ids` (seq,); fills `stats` as `score_step`
    does. Holds no layer views, so many documents' starts fit where their views would not."""
    pre = prefill_for(loaded, op, ids, prefill, exact_kv)
    if op.kind == CACHE_OBJECT:
        cache = op.make_cache(loaded.model.config)
        for i, (k, v) in enumerate(pre.kv):
            cache.update(k, v, i)
        if stats is not None:
            stats["cache_bytes"] = cache_object_bytes(cache)
        return StepStart(pre.kv, cache=cache)
    states = [op.start(v) for v in pre.views] if op.kind == POLICY else None
    held = [s["held"] for s in states] if states is not None else op.decide(pre.views)
    if stats is not None:
        stats["held"] = [h.clone() for h in held]
    return StepStart(pre.kv, held, states)


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
        self.buffer_k[..., self.length:end, :], self.buffer_v[..., self.length:end,
                                                              :] = key_states, value_states
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


def masked_steps(loaded: Loaded, op, tokens: torch.Tensor, prefill: int,
                 starts: list[StepStart]) -> torch.Tensor:
    """Presses and decode-time policies, one token per forward: every entry stays in the layer's
    tensors and what a KV head no longer holds is masked out for it (the same softmax as removing
    it). A policy sees each query's attention weights and updates what is held after it."""
    decode = tokens.shape[1]
    n_layers = len(starts[0].kv)
    kv = [(torch.cat([s.kv[i][0] for s in starts]),
           torch.cat([s.kv[i][1] for s in starts])) for i in range(n_layers)]
    # (docs, kv_heads, P + decode, head_dim)
    cache = Cache(layers=[GrowingLayer(k, v, decode) for k, v in kv])
    policy = op.kind == POLICY
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
            logits = _write_step(logits, j, decode, _next_logits(loaded, tokens[:, j:j + 1], n, visible,
                                                                 cache))
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
            setattr(layer, name, (torch.cat([q for q, _ in stored]),
                                  torch.stack([s for _, s in stored]).view(-1, 1, 1, 1)))
    return joined


def cache_object_steps(loaded: Loaded, tokens: torch.Tensor, prefill: int,
                       starts: list[StepStart]) -> torch.Tensor:
    """A transformers cache object (e.g. QuantizedCache) as the model uses it: filled with the
    exact prefill through its own `update`, then one cached forward per decoded token, all
    documents in one batch where their caches can be joined."""
    joined = _joined_cache(loaded, starts)
    groups = [(tokens, joined)] if joined is not None else [(tokens[d:d + 1], s.cache) for d,
                                                            s in enumerate(starts)]
    out = []
    for rows, cache in groups:
        logits = None
        for j in range(rows.shape[1]):
            logits = _write_step(logits, j, rows.shape[1], _next_logits(loaded, rows[:, j:j + 1], prefill + j,
                                                                        None, cache))
        out.append(logits)
    return out[0] if len(out) == 1 else torch.cat(out)  # (docs, decode, vocab)
