"""Switching to an adapter mid-sequence: the base model's prefill of the prefix, the cache the
adapter continues from under each policy (full recompute, stale reuse, tail patch, activated
adapter), the answer read after the marker, and how far two policies' logits and caches differ."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kvutils.cache.prefilled import Prefilled
from kvutils.lora.boundary import copy_cache, efficient_head, new_cache, skip_lower_layers
from kvutils.lora.families import decoder, decoder_layers
from kvutils.lora.tails import active_adapter
from kvutils.models.greedy import cache_layers

POLICIES = ("recompute", "stale", "tail_patch", "activated")
POLICY_TEXT = {
    "recompute": "full recompute of the prefix under the adapter (the reference)",
    "stale": "stale reuse: the base cache in every layer",
    "tail_patch": "tail patch: layers below L−k kept, the tail's K/V recomputed from the stored boundary",
    "activated": "activated adapter (aLoRA): the base cache reused whole",
}


def base_prefill(model, ids: torch.Tensor, boundary_layers: Sequence[int]) -> Prefilled:
    """Prefill `ids` (1, prefix) with the base model (adapters off), keeping the hidden states that
    enter each of `boundary_layers` — what a server would store to switch to a tail of that depth."""
    cache = new_cache(model)
    with torch.no_grad(), active_adapter(model, None):
        out = decoder(model)(input_ids=ids, cache=cache, use_cache=True, output_hidden_states=True)
    boundary = {layer: out.hidden_states[layer] for layer in boundary_layers}
    return Prefilled(kv=cache, boundary=boundary, length=ids.shape[-1])


@torch.no_grad()
def switch_cache(model, policy: str, prefilled: Prefilled, ids: torch.Tensor, adapter: str, k: int):
    """The cache the adapter continues from, under one policy. `ids` (1, prefix) are the prefix's
    tokens (only `recompute` reads them)."""
    n_layers = len(decoder_layers(model))
    if policy in ("stale", "activated"):
        return copy_cache(prefilled.kv)
    cache = new_cache(model)
    with active_adapter(model, adapter):
        if policy == "recompute":
            decoder(model)(input_ids=ids, cache=cache, use_cache=True)
            return cache
        if policy == "tail_patch":
            start = n_layers - k
            positions = torch.arange(prefilled.length, device=ids.device)[None]
            with skip_lower_layers(model, start):
                decoder(model)(inputs_embeds=prefilled.boundary[start], position_ids=positions,
                               cache=cache, use_cache=True)
            kept = copy_cache(prefilled.kv).layers
            cache.layers[:start] = kept[:start]  # bit-identical by construction: the same tensors
            return cache
    raise ValueError(f"policy: {policy!r} unknown; choose one of {', '.join(POLICIES)}")


@torch.no_grad()
def answer_logits(model, adapter: str | None, cache, marker_ids: torch.Tensor) -> torch.Tensor:
    """Run the marker's tokens (batch, m) on `cache` (which grows by m) under `adapter`; return the
    logits at the marker's last token, (batch, vocab). An activated adapter finds its invocation in
    these tokens and switches on from there."""
    with active_adapter(model, adapter), efficient_head(model):
        out = model(input_ids=marker_ids, cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def compare_logits(reference: torch.Tensor, other: torch.Tensor) -> dict:
    """Max |logit difference|, KL(reference ‖ other) in nats and top-1 agreement, per row, in float64."""
    ref, oth = reference.double(), other.double()
    log_p, log_q = ref.log_softmax(-1), oth.log_softmax(-1)
    return {"max_abs_logit_diff": (ref - oth).abs().amax(-1),
            "kl": (log_p.exp() * (log_p - log_q)).sum(-1).clamp(min=0),
            "top1_agree": ref.argmax(-1) == oth.argmax(-1)}


def layer_differences(cache_a, cache_b, length: int) -> list[float | None]:
    """Per layer, max |difference| of the keys and values of positions < `length` that both caches
    still hold (a sliding-window layer keeps only its most recent entries); None for a layer where
    no such position is left. None, not NaN: a NaN here is a real NaN in a cache, and every check
    must fail on it."""
    out = []
    for a, b in zip(cache_layers(cache_a, cache_a.get_seq_length()), cache_layers(cache_b,
                                                                                  cache_b.get_seq_length())):
        start = max(a.first_position, b.first_position)
        held_a, held_b = a.positions(start, length), b.positions(start, length)
        if start >= length or held_a is None or held_b is None:
            out.append(None)
            continue
        out.append(nan_max((x - y).abs().max().item() for x, y in zip(held_a, held_b)))
    return out


def nan_max(values) -> float | None:
    """The largest of `values`, NaN if any is NaN (Python's max() keeps or drops a NaN depending
    on where it stands), None-s skipped, None if nothing is left."""
    numbers = [float(v) for v in values if v is not None]
    if any(math.isnan(v) for v in numbers):
        return math.nan
    return max(numbers, default=None)
