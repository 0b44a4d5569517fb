"""Bytes a cache holds."""
from __future__ import annotations

import torch

from kvutils.cache.base import CacheOp, kv_shape
from kvutils.cache.methods.exact import Exact


def cache_bytes(config, op: CacheOp, prefill: int, dtype: torch.dtype) -> float:
    """Bytes the operation's cache holds after `prefill` tokens, all layers: evicted entries
    excluded, stored ones in their stored size, sliding-window layers at most window - 1 entries.
    (Data-dependent methods: `held_bytes` counts what they actually kept.)"""
    kv_heads, head_dim = kv_shape(config)
    slots = torch.arange(prefill)
    held = op.keeps(slots, torch.tensor([prefill]))[0]
    none = torch.zeros_like(held)
    key_done = (op.stored_after(slots) < prefill) if op.transforms_storage else none
    value_done = (op.values_stored_after(slots) < prefill) if op.transforms_storage else none
    base, e = Exact(), dtype.itemsize
    total = 0.0
    for kind in getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers:
        h = held & ((prefill - slots) < config.sliding_window) if kind == "sliding_attention" else held
        total += op.stored_key_bytes(int((h & key_done).sum()), kv_heads, head_dim, e)
        total += op.stored_value_bytes(int((h & value_done).sum()), kv_heads, head_dim, e)
        total += base.stored_key_bytes(int((h & ~key_done).sum()), kv_heads, head_dim, e)
        total += base.stored_value_bytes(int((h & ~value_done).sum()), kv_heads, head_dim, e)
    return total


def held_bytes(config, kept: list[torch.Tensor], dtype: torch.dtype) -> float:
    """Bytes of the entries a data-dependent method holds: `kept` per layer (kv_heads, n) bool over
    the document's positions 0..n-1 (sliding-window layers: only the last window - 1 count)."""
    _, head_dim = kv_shape(config)
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    total = 0
    for kind, k in zip(kinds, kept):
        n = k.shape[-1]
        if kind == "sliding_attention":
            k = k & ((n - torch.arange(n)) < config.sliding_window)
        total += int(k.sum())
    return float(total * 2 * head_dim * dtype.itemsize)
