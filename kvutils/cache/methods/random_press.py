"""The random press: the baseline every eviction method must beat."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from kvutils.cache.methods.press import Press
from kvutils.core import checks


@dataclass(frozen=True)
class RandomPress(Press):
    """The baseline every method must beat: each KV head keeps a uniformly random subset of the
    prefill, of kvpress's size; the draw is seeded by `seed` and the layer (same run, same set)."""

    seed: int = 0
    name: ClassVar[str] = "random"
    examples: ClassVar[tuple[str, ...]] = ("random:compression_ratio=0.5",)

    def __post_init__(self):
        super().__post_init__()
        checks.check_int(f"{self.name}: seed", self.seed, 0)

    def score(self, view):
        g = torch.Generator().manual_seed(self.seed * 100_003 + view.layer)
        return torch.rand(view.keys.shape[1:3], generator=g)
