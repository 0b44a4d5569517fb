"""What a prefill leaves behind: its cache, what each layer saw (LayerView), and the hidden states
at the layer boundaries where an adapter's tail starts."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache

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
    """What a prefill leaves behind, for the steps that continue from it: the one type for the cache
    operations (kvutils.cache.scoring) and for an adapter switch (kvutils.lora).

    kv: the cache, a KV list (the operations) or a transformers Cache (an adapter switch);
    views: what each layer saw, for the data-dependent methods;
    boundary: layer -> the hidden states entering it, (1, prefix, hidden), for an adapter's tail;
    length: the tokens prefilled."""

    kv: KV | Cache
    views: list[LayerView] | None = None
    boundary: dict[int, torch.Tensor] | None = None
    length: int | None = None
