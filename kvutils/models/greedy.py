"""Decoding engines: greedy decoding with the KV cache and with full recomputation, and cache access.

Both paths return the logits of every generated step, so chapter 1 can compare them one step at a
time. Everything runs under `torch.inference_mode()`; no sampling, so the same inputs give the same
outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from kvutils.models.loading import Loaded


@torch.inference_mode()
def greedy(loaded: Loaded, input_ids: torch.Tensor, new_tokens: int,
           use_cache: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy-decode `new_tokens` tokens after `input_ids` (batch, seq) — no padding, no early stop.

    use_cache=True: one prefill, then one token per step against the growing KV cache.
    use_cache=False: the whole sequence is recomputed from scratch at every step.
    Returns (token_ids (batch, new_tokens), step_logits (batch, new_tokens, vocab)), logits in the
    model's dtype.
    """
    if loaded.family != "causal":
        raise ValueError(f"greedy needs a causal model; {loaded.name} is an {loaded.family}")
    model = loaded.model
    sequence = input_ids.to(loaded.device)
    if sequence.dim() == 1:
        sequence = sequence[None]
    tokens, step_logits = [], []
    cache = DynamicCache(config=model.config) if use_cache else None
    next_input = sequence
    for _ in range(new_tokens):
        if use_cache:
            out = model(input_ids=next_input, cache=cache, use_cache=True, logits_to_keep=1)
        else:
            out = model(input_ids=sequence, use_cache=False, logits_to_keep=1)
        logits = out.logits[:, -1]  # (batch, vocab)
        token = logits.argmax(dim=-1, keepdim=True)  # (batch, 1)
        step_logits.append(logits)
        tokens.append(token)
        sequence = torch.cat([sequence, token], dim=-1)
        next_input = token
    return torch.cat(tokens, dim=-1), torch.stack(step_logits, dim=1)


@torch.inference_mode()
def recompute_logits(loaded: Loaded, sequence: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """No-cache logits for every generated step of `sequence` (batch, prompt_len + steps), in one
    forward pass: position prompt_len - 1 + t sees exactly the context of step t (causal mask),
    computed from the tokens with no cache. Equal to `greedy(use_cache=False)` along the same
    tokens up to rounding; the residue is the sequence-length dependence measured in chapter 1.
    Returns (batch, steps, vocab).
    """
    steps = sequence.shape[-1] - prompt_len
    out = loaded.model(input_ids=sequence.to(loaded.device), use_cache=False, logits_to_keep=steps + 1)
    return out.logits[:, :-1]


@dataclass
class LayerKV:
    """One layer's cached keys and values. Sliding-window layers may hold only the most recent
    positions: `first_position` is the absolute position of the first one held."""

    keys: torch.Tensor  # (batch, kv_heads, held, head_dim)
    values: torch.Tensor  # (batch, kv_heads, held, head_dim)
    first_position: int

    def positions(self, start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Keys and values of absolute positions [start, stop), or None if not all are held."""
        held_stop = self.first_position + self.keys.shape[-2]
        if start < self.first_position or stop > held_stop:
            return None
        a, b = start - self.first_position, stop - self.first_position
        return self.keys[:, :, a:b], self.values[:, :, a:b]


def cache_layers(cache, seq_len: int) -> list[LayerKV]:
    """Each layer's cached K/V from a transformers `Cache` filled with `seq_len` tokens."""
    layers = []
    for layer in cache.layers:
        held = layer.keys.shape[-2]
        layers.append(LayerKV(layer.keys, layer.values, seq_len - held))
    return layers


@torch.inference_mode()
def prefill(loaded: Loaded, input_ids: torch.Tensor) -> list[LayerKV]:
    """Run one forward over `input_ids` (batch, seq) and return every layer's cached K/V."""
    ids = input_ids.to(loaded.device)
    if ids.dim() == 1:
        ids = ids[None]
    cache = DynamicCache(config=loaded.model.config)
    loaded.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    return cache_layers(cache, ids.shape[-1])
