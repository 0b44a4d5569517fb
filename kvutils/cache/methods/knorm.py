"""Knorm: keep the entries whose keys have the smallest L2 norm."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.methods.press import Press


@dataclass(frozen=True)
class KnormPress(Press):
    """Knorm (Devoto et al. 2024, "A simple and effective L2 norm-based strategy for KV cache
    compression"): each KV head keeps the prefill entries whose keys have the smallest L2 norm."""

    name: ClassVar[str] = "knorm"
    examples: ClassVar[tuple[str, ...]] = ("knorm:compression_ratio=0.5",)

    def score(self, view):
        return -view.keys[0].norm(dim=-1)
