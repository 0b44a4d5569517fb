"""One forward of a causal model over a cache whose entries the caller chooses.

`attention_masks` builds the model's `attention_mask` argument from an explicit (queries, keys)
visibility, adding Gemma 3's sliding window; `ComputedLayer` is a cache layer that hands attention a
computed key/value set instead of appending; `forward_logits` runs the model with both. The prefills
(`kvutils.cache.prefilled`) and the scoring paths (`kvutils.cache.scoring`) are built on them.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.cache_utils import Cache, DynamicLayer

from kvutils.models.layers import layer_types
from kvutils.models.loading import Loaded


def attention_masks(loaded: Loaded, visible: torch.Tensor, query_slots: torch.Tensor,
                    key_slots: torch.Tensor):
    """The `attention_mask` argument for a forward whose queries at document positions
    `query_slots` (q,) may read the keys at `key_slots` (k,) where `visible` (q, k) is True.
    Adds the model's own sliding window (by document position) for sliding layers. Returns one
    additive (1, 1, q, k) mask, or a dict per layer type, which is what the models take."""
    config = loaded.config
    kinds = set(layer_types(config))
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


def forward_logits(loaded: Loaded, ids: torch.Tensor, positions: torch.Tensor, masks, layers: list,
                   logits_to_keep: int = 0) -> torch.Tensor:
    """The logits of one forward of `ids` (1, n) at `positions` (n,) reading the cache `layers`."""
    out = loaded.model(input_ids=ids.to(loaded.device), position_ids=positions.view(1, -1).to(loaded.device),
                       attention_mask=masks, cache=Cache(layers=layers), use_cache=True,
                       logits_to_keep=logits_to_keep)
    return out.logits[0]  # (kept positions, vocab)
