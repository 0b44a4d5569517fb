"""Bytes a KV cache holds, every count in one place.

From formulas: per token for a published configuration (`kv_bytes_per_token`, `published_bytes`,
the article's Table 1), after `seq_len` tokens for a model's config (`model_cache_bytes`: the
textbook formula beside what the exact cache keeps), and after a prefill under a cache operation
(`cache_bytes`: evicted entries out, stored ones at their stored size). From what was held: the
entries a data-dependent method kept (`kept_bytes`), and the tensors of a real transformers cache
object (`cache_object_bytes`, `real_cache_bytes`).
"""
from __future__ import annotations

import torch
from transformers import DynamicCache

from kvutils.cache.base import CacheOp
from kvutils.cache.methods.exact import Exact
from kvutils.models.layers import kv_shape, layer_types, layer_windows
from kvutils.models.loading import Loaded

KIB, GIB = 1024, 1024 ** 3
SEQUENCE_128K = 128 * 1024  # the article's "per 128K-token sequence"


# --------------------------------------------------------------------------- formulas


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_value: int = 2) -> int:
    """Keys and values (2) of every layer and KV head: 2 × layers × kv_heads × head_dim × bytes."""
    return 2 * layers * kv_heads * head_dim * bytes_per_value


def mla_bytes_per_token(layers: int, latent_dim: int, rope_key_dim: int, bytes_per_value: int = 2) -> int:
    """Multi-head latent attention caches one compressed latent and one positional key per layer."""
    return layers * (latent_dim + rope_key_dim) * bytes_per_value


def published_bytes(row: dict, bytes_per_value: int = 2) -> int:
    """Bytes per token of one row of the article's Table 1 (data/article_figures.json)."""
    if row["attention"] == "MLA":
        return mla_bytes_per_token(row["layers"], row["latent_dim"], row["rope_key_dim"], bytes_per_value)
    return kv_bytes_per_token(row["layers"], row["kv_heads"], row["head_dim"], bytes_per_value)


def model_cache_bytes(config, seq_len: int, dtype: torch.dtype = torch.float32) -> dict:
    """Bytes of a model's cache after `seq_len` tokens, from its configuration.

    `full_model_formula` is the textbook 2 × layers × kv_heads × head_dim × bytes × tokens.
    `held` is what a transformers `DynamicCache` really keeps (the exact cache operation's bytes):
    every token for a global layer, the last `sliding_window − 1` for a sliding-window layer.
    """
    kv_heads, head_dim = kv_shape(config)
    per_token = kv_bytes_per_token(config.num_hidden_layers, kv_heads, head_dim, dtype.itemsize)
    return {
        "seq_len": seq_len,
        "bytes_per_token": per_token,
        "full_model_formula": per_token * seq_len,
        "held": int(cache_bytes(config, Exact(), seq_len, dtype)),
        "sliding_layers": sum(w is not None for w in layer_windows(config)),
    }


def cache_bytes(config, op: CacheOp, prefill: int, dtype: torch.dtype) -> float:
    """Bytes the operation's cache holds after `prefill` tokens, all layers: evicted entries
    excluded, stored ones in their stored size, sliding-window layers at most window - 1 entries.
    (Data-dependent methods: `kept_bytes` counts what they actually kept.)"""
    kv_heads, head_dim = kv_shape(config)
    slots = torch.arange(prefill)
    held = op.keeps(slots, torch.tensor([prefill]))[0]
    none = torch.zeros_like(held)
    key_done = (op.stored_after(slots) < prefill) if op.transforms_storage else none
    value_done = (op.values_stored_after(slots) < prefill) if op.transforms_storage else none
    base, e = Exact(), dtype.itemsize
    total = 0.0
    for kind in layer_types(config):
        h = held & ((prefill - slots) < config.sliding_window) if kind == "sliding_attention" else held
        total += op.stored_key_bytes(int((h & key_done).sum()), kv_heads, head_dim, e)
        total += op.stored_value_bytes(int((h & value_done).sum()), kv_heads, head_dim, e)
        total += base.stored_key_bytes(int((h & ~key_done).sum()), kv_heads, head_dim, e)
        total += base.stored_value_bytes(int((h & ~value_done).sum()), kv_heads, head_dim, e)
    return total


# --------------------------------------------------------------------------- what was held


def kept_bytes(config, kept: list[torch.Tensor], dtype: torch.dtype) -> float:
    """Bytes of the entries a data-dependent method holds: `kept` per layer (kv_heads, n) bool over
    the document's positions 0..n-1 (sliding-window layers: only the last window - 1 count)."""
    _, head_dim = kv_shape(config)
    total = 0
    for kind, k in zip(layer_types(config), kept):
        n = k.shape[-1]
        if kind == "sliding_attention":
            k = k & ((n - torch.arange(n)) < config.sliding_window)
        total += int(k.sum())
    return float(total * 2 * head_dim * dtype.itemsize)


def _tensor_bytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (tuple, list)):
        return sum(_tensor_bytes(t) for t in x)
    inner = [getattr(x, a) for a in ("_data", "_scale", "_shift", "W_q", "meta") if hasattr(x, a)]
    return sum(_tensor_bytes(t) for t in inner)


def cache_object_bytes(cache) -> int:
    """Bytes a transformers cache object holds: its keys and values (a `DynamicCache`), or its
    quantised tensors with their scales and its full-precision residuals (a `QuantizedCache`)."""
    total = 0
    for layer in cache.layers:
        for attr in ("_quantized_keys", "_quantized_values", "keys", "values"):
            total += _tensor_bytes(getattr(layer, attr, None))
    return total


@torch.inference_mode()
def real_cache_bytes(loaded: Loaded, ids: torch.Tensor) -> int:
    """Bytes of the keys and values a real forward pass leaves in the cache."""
    cache = DynamicCache(config=loaded.model.config)
    loaded.model(input_ids=ids.to(loaded.device), cache=cache, use_cache=True, logits_to_keep=1)
    return cache_object_bytes(cache)
