"""PyramidKV: SnapKV's scores with budgets that fall with depth."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.methods.press import AT_LEVELS, FRONTIER_RATIOS, at_ratios
from kvutils.cache.methods.snapkv import SnapKVPress
from kvutils.core import checks


@dataclass(frozen=True)
class PyramidKVPress(SnapKVPress):
    """PyramidKV (Cai et al. 2024, arXiv:2406.02069): SnapKV's scores with layer-dependent budgets,
    largest in the first layer and falling linearly to the last (shape `beta`), their mean the
    SnapKV budget; where the pyramid does not fit the prefill it falls back to SnapKV's budget
    (kvpress's rule, reproduced)."""

    beta: int = 20
    name: ClassVar[str] = "pyramidkv"
    examples: ClassVar[tuple[str, ...]] = ("pyramidkv:compression_ratio=0.5,window=2,kernel=3,beta=2",)
    display: ClassVar[str] = "PyramidKV"
    colour: ClassVar[str | None] = "#9467bd"
    place: ClassVar[int] = 140
    frontier: ClassVar[tuple[str, ...]] = at_ratios(*FRONTIER_RATIOS)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS
    # always_keeps: SnapKV's (its observation window)

    def __post_init__(self):
        super().__post_init__()
        checks.check_count(f"{self.name}: beta", self.beta)

    def budget(self, view):
        q_len, w = view.keys.shape[-2], self.window
        capacity = w + q_len * (1 - self.compression_ratio)
        low = (capacity - w) / self.beta
        high = (capacity - w) * 2 - low
        if high >= q_len - w:
            high = q_len - w
            low = (capacity - w) * 2 - high
        if not q_len >= high >= low >= w:
            return max(1, round(q_len * (1 - self.compression_ratio)))
        return max(1, round(high - view.layer * (high - low) / max(view.n_layers - 1, 1)))
