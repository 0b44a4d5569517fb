"""The base of the decode-time policies, which evict as the decode goes.

A decode-time policy's budget, (1 − compression_ratio) × prefill entries per KV head, is applied at
the end of the prefill and then held constant, one entry evicted after every decoded token's
attention. Which entry depends on the attention the evictions so far allowed, so only the step path
scores it. Attention weights are softmax(q·k × the model's scale) under the model's own mask
(causal, and Gemma 3's sliding window where the layer has one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvutils.cache.base import POLICY, CacheOp
from kvutils.cache.methods.press import check_ratio

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DecodePolicy(CacheOp):
    """Base of the decode-time policies. `start(view)` -> state with `held` (kv_heads, P) bool, cut to
    the budget; `step(state, weights)` takes the attention weights (1, heads, 1, n + 1) of the query
    at n over every slot so far and leaves `held` (kv_heads, n + 1) at the budget again.
    `stack(states)` joins several documents' states of one layer (tensors gain a leading document
    axis) and `step_many(state, weights)` steps them together, weights (docs, heads, 1, n + 1);
    `step` is `step_many` on a stack of one."""

    compression_ratio: float = 0.5
    needs_views: ClassVar[bool] = True
    data_dependent: ClassVar[bool] = True
    has_fast_path: ClassVar[bool] = False
    family: ClassVar[str] = "decode-time eviction"
    kind: ClassVar[str] = POLICY

    def __post_init__(self):
        check_ratio(self.name, self.compression_ratio)

    def stack(self, states: list[dict]) -> dict:
        import torch

        return {k: torch.stack([s[k] for s in states]) if torch.is_tensor(v) else v for k,
                v in states[0].items()}

    def step(self, state, weights):
        import torch

        stepped = self.step_many(self.stack([state]), weights)
        state.update({k: v[0] if torch.is_tensor(v) else v for k, v in stepped.items()})
        return state

    def step_many(self, state: dict, weights: torch.Tensor) -> dict:
        raise NotImplementedError
