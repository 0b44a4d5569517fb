"""The model's own attention, with two additions a cache method needs: per layer and per KV head
visibility, and a look at the queries and attention weights.

transformers picks a layer's attention function by `config._attn_implementation` (its public
`AttentionInterface` registry). `session(loaded, ...)` switches the model to "kvutils_sdpa" for the
duration of a `with` block and back in `finally`. Inside, every attention call
- ANDs the layer's extra visibility `masks[layer]` (bool, (kv_heads, keys) for all queries,
  (kv_heads, queries, keys), or (batch, kv_heads, queries, keys) per batch row) into the attention
  mask, each KV head's column shared by the query
  heads of its group (the order `repeat_kv` uses);
- hands `record(layer, query, key, value, weights_fn, scale)` the post-rotary queries (batch, heads, q,
  head_dim), the keys and values the layer attends to, and a function computing the softmax
  weights (batch, heads, rows, keys) of chosen query rows (`weights_fn(rows=slice)`, all by default)
  under the same mask (only evaluated where a method asks), and the layer's softmax scale.
Outside a session, or with neither set, the layer runs transformers' sdpa unchanged.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from kvutils.models.loading import Loaded

NAME = "kvutils_sdpa"


@dataclass
class Session:
    masks: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> extra bool visibility
    record: Callable | None = None  # record(layer, query, key, value, weights_fn, scale)


_ACTIVE: list[Session] = []  # the innermost session is last (sessions do not nest across threads)


def combined_mask(attention_mask, extra: torch.Tensor, groups: int, q: int, k: int, dtype, device):
    """The model's mask with `extra`'s hidden keys hidden too, each KV head's column shared by its
    query group: (batch or 1, heads, q, k), bool where the model's mask is bool or absent, else
    additive (the model's values where `extra` shows a key, the dtype's minimum where it hides one)."""
    if extra.dim() == 2:  # (kv_heads, k): the same for every query
        extra = extra[:, None, :]
    if extra.dim() == 3:  # (kv_heads, q or 1, k): the same for every batch row
        extra = extra[None]
    extra = extra.to(device)[:, :, None]  # (batch or 1, kv_heads, 1, q or 1, k): one column per query group
    base = attention_mask[..., :k] if attention_mask is not None else torch.ones(1, 1, q, k, dtype=torch.bool,
                                                                                 device=device)
    grouped = base.view(base.shape[0], 1, 1, q, k) if base.shape[1] == 1 else base.unflatten(1, (-1, groups))
    if base.dtype == torch.bool:
        out = grouped & extra
    else:  # one pass: the model's additive values where shown, the minimum where hidden
        out = torch.where(extra, grouped, torch.tensor(torch.finfo(dtype).min, dtype=base.dtype,
                                                       device=device))
    batch, kv_heads = out.shape[:2]
    return out.expand(batch, kv_heads, groups, q, k).reshape(batch, kv_heads * groups, q, k)


def kvutils_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0,
                 scaling: float | None = None,
                 **kwargs):
    s = _ACTIVE[-1] if _ACTIVE else None
    layer = getattr(module, "layer_idx", None)
    extra = s.masks.get(layer) if s is not None else None
    if s is None or (extra is None and s.record is None):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling,
                                      **kwargs)
    groups = query.shape[1] // key.shape[1]
    q, k = query.shape[2], key.shape[2]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    mask = attention_mask[..., :k] if attention_mask is not None else None
    if mask is None and q > 1:  # no mask given: the causal one sdpa would have used (is_causal)
        mask = torch.ones(q, k, dtype=torch.bool, device=query.device).tril(k - q)[None, None]
    if extra is not None:
        mask = combined_mask(mask, extra, groups, q, k, query.dtype, query.device)
    if s.record is not None:
        def weights(rows: slice | None = None, mask=mask):
            """The softmax weights of the queries at `rows` (all by default) over every key."""
            rows = slice(None) if rows is None else rows
            picked = query[:, :, rows]
            batch, heads, n = picked.shape[:3]
            # (batch, kv_heads, groups * n, head_dim)
            grouped = picked.reshape(batch, key.shape[1], groups * n, -1)
            # one product per KV head (broadcasting the keys over the groups would copy them per group)
            scores = (grouped @ key.transpose(-1, -2)).view(batch, heads, n, k) * scale
            if mask is not None:
                m = mask[..., rows, :] if mask.shape[-2] > 1 else mask
                scores = scores.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else scores + m
            return scores.float().softmax(-1).to(query.dtype)
        s.record(layer, query, key, value, weights, scale)
    # each KV head read by its query group in place (repeating keys/values per head costs more than the
    # attention)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scale,
                                                           enable_gqa=groups > 1)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, kvutils_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)


def _configs(model) -> list:
    """Every config object whose `_attn_implementation` a layer may read (Gemma 3 nests one)."""
    out = [model.config]
    text = getattr(model.config, "text_config", None)
    if text is not None and text is not model.config:
        out.append(text)
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and all(config is not c for c in out):
            out.append(config)
    return out


@contextlib.contextmanager
def session(loaded: Loaded, masks: dict[int, torch.Tensor] | None = None, record: Callable | None = None):
    """Run the model's attention through `kvutils_sdpa` with these masks / this recorder; restores
    the model's own implementation afterwards, also on error. Yields the `Session`, whose `masks`
    may be replaced between forwards (one session for many decode steps)."""
    configs = _configs(loaded.model)
    before = [c._attn_implementation for c in configs]
    if any(b not in ("sdpa", NAME) for b in before):
        raise ValueError(f"{loaded.name}: cache methods that read or mask attention per head need the sdpa "
                         f"attention implementation (the default); this model uses {before[0]!r}")
    _ACTIVE.append(Session(dict(masks or {}), record))
    for c in configs:
        c._attn_implementation = NAME
    try:
        yield _ACTIVE[-1]
    finally:
        _ACTIVE.pop()
        for c, b in zip(configs, before):
            c._attn_implementation = b
