"""AdaKV: SnapKV's scores with the layer's budget shared among its KV heads."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import check_fraction
from kvutils.cache.methods.press import AT_LEVELS, FRONTIER_RATIOS, Press, at_ratios, kept_per_head, top_mask
from kvutils.cache.methods.snapkv import SnapKVPress
from kvutils.core import checks


@dataclass(frozen=True)
class AdaKVPress(Press):
    """AdaKV (Feng et al. 2024, arXiv:2407.11550) over SnapKV's scores: the layer's budget (kv_heads
    × kvpress's per-head budget) goes to the top scores across all its KV heads together, so heads
    with concentrated attention give entries to heads with spread-out attention; each head keeps
    at least `safeguard` × the per-head budget (kvpress's alpha_safeguard)."""

    window: int = 64
    kernel: int = 5
    safeguard: float = 0.2
    name: ClassVar[str] = "adakv"
    examples: ClassVar[tuple[str, ...]] = ("adakv:compression_ratio=0.5,window=4,kernel=3",)
    display: ClassVar[str] = "AdaKV"
    colour: ClassVar[str | None] = "#e377c2"
    place: ClassVar[int] = 150
    frontier: ClassVar[tuple[str, ...]] = at_ratios(*FRONTIER_RATIOS)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS

    def always_keeps(self):
        return SnapKVPress(self.compression_ratio, self.window, self.kernel).always_keeps()

    def __post_init__(self):
        super().__post_init__()
        # named as this op's, then SnapKV's own checks
        checks.check_count(f"{self.name}: window", self.window)
        checks.check_count(f"{self.name}: kernel", self.kernel)
        SnapKVPress(self.compression_ratio, self.window, self.kernel)
        check_fraction(self.name, "safeguard", self.safeguard)

    def check_lengths(self, prefill, decode):
        SnapKVPress(self.compression_ratio, self.window, self.kernel).check_lengths(prefill, decode)

    def decide(self, views):
        import torch

        out = []
        for view in views:
            scores = SnapKVPress(self.compression_ratio, self.window, self.kernel).score(view).float().cpu()
            heads, P = scores.shape
            n_kept = kept_per_head(P, self.compression_ratio)
            safe = top_mask(scores, int(n_kept * self.safeguard)) if int(n_kept * self.safeguard) else None
            if safe is not None:
                scores = scores.masked_fill(safe, torch.finfo(scores.dtype).max)
            out.append(top_mask(scores.reshape(1, -1), heads * n_kept).view(heads, P))
        return out
