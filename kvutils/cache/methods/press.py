"""What the prefill-time presses share: kvpress's budget, the top-k mask, and the `Press` base class.

A press looks once at the prefill (each layer's keys, values and post-rotary queries, as kvpress's
`score(module, hidden_states, keys, values, attentions, kwargs)` does) and decides which prefill
entries each KV head keeps; every decoded token is then kept. `compression_ratio` has kvpress's
meaning: the fraction of the prefill's entries removed, i.e. each KV head keeps
max(1, int(prefill × (1 − compression_ratio))) of them (PyramidKV and AdaKV move that budget
between layers / heads and keep the layer's or model's total). The kept set is fixed after the
prefill, so the one-forward (fast) path scores it exactly; the step path checks it.
Attention weights are softmax(q·k × the model's scale) under the model's own mask (causal, and
Gemma 3's sliding window where the layer has one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvutils.cache.base import PRESS, CacheOp, reject

if TYPE_CHECKING:
    import torch

    from kvutils.cache.prefilled import LayerView


FRONTIER_RATIOS = (0.25, 0.5)  # chapter 4's frontier sweeps each press over these budgets
AT_LEVELS = ("",)  # a press or policy's `retrieval`: at its defaults, at each budget level of the test


def at_ratios(*ratios: float) -> tuple[str, ...]:
    """A press's or policy's settings on the frontier, one per ratio: ("compression_ratio=0.25", ...)."""
    return tuple(f"compression_ratio={r}" for r in ratios)


def check_ratio(op: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        reject(op, "compression_ratio", value, "a number with 0 <= compression_ratio < 1")


def kept_per_head(prefill: int, compression_ratio: float) -> int:
    """kvpress's ScorerPress budget: entries each KV head keeps."""
    return max(1, int(prefill * (1 - compression_ratio)))


def top_mask(scores: torch.Tensor, n: int) -> torch.Tensor:
    """(rows, P) bool: the `n` highest scores of each row (ties: the earlier position)."""
    import torch

    keep = torch.zeros(scores.shape, dtype=torch.bool)
    keep.scatter_(-1, scores.float().cpu().topk(n, dim=-1, sorted=False).indices, True)
    return keep


@dataclass(frozen=True)
class Press(CacheOp):
    """Base of the prefill-time presses: `score(view)` (kv_heads, P), higher = kept."""

    compression_ratio: float = 0.5
    needs_views: ClassVar[bool] = True
    data_dependent: ClassVar[bool] = True
    family: ClassVar[str] = "press"
    kind: ClassVar[str] = PRESS

    def __post_init__(self):
        check_ratio(self.name, self.compression_ratio)

    def score(self, view: LayerView) -> torch.Tensor:
        raise NotImplementedError

    def budget(self, view: LayerView) -> int:
        return kept_per_head(view.keys.shape[-2], self.compression_ratio)

    def decide(self, views: list[LayerView]) -> list[torch.Tensor]:
        """Per layer, (kv_heads, P) bool: the prefill entries each KV head keeps."""
        return [top_mask(self.score(v), self.budget(v)) for v in views]
