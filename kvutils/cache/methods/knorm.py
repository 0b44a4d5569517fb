"""Knorm: keep the entries whose keys have the smallest L2 norm."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.methods.press import AT_LEVELS, FRONTIER_RATIOS, Press, at_ratios


@dataclass(frozen=True)
class KnormPress(Press):
    """Knorm (Devoto et al. 2024, "A simple and effective L2 norm-based strategy for KV cache
    compression"): each KV head keeps the prefill entries whose keys have the smallest L2 norm."""

    name: ClassVar[str] = "knorm"
    examples: ClassVar[tuple[str, ...]] = ("knorm:compression_ratio=0.5",)
    display: ClassVar[str] = "K-norm"
    colour: ClassVar[str | None] = "#ff7f0e"
    place: ClassVar[int] = 110
    frontier: ClassVar[tuple[str, ...]] = at_ratios(*FRONTIER_RATIOS)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS

    def always_keeps(self):
        return "nothing in particular (no sinks, no recent window)"

    def score(self, view):
        return -view.keys[0].norm(dim=-1)
