"""The random press: the baseline every eviction method must beat."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.methods.press import AT_LEVELS, FRONTIER_RATIOS, Press, at_ratios
from kvutils.core import checks


@dataclass(frozen=True)
class RandomPress(Press):
    """The baseline every method must beat: each KV head keeps a uniformly random subset of the
    prefill, of kvpress's size; the draw is seeded by `seed` and the layer (same run, same set)."""

    seed: int = 0
    name: ClassVar[str] = "random"
    examples: ClassVar[tuple[str, ...]] = ("random:compression_ratio=0.5",)
    display: ClassVar[str] = "random"
    colour: ClassVar[str | None] = "#7f7f7f"  # the baseline's grey
    place: ClassVar[int] = 100
    frontier: ClassVar[tuple[str, ...]] = at_ratios(*FRONTIER_RATIOS)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS

    def always_keeps(self):
        return "nothing in particular (no sinks, no recent window)"

    def __post_init__(self):
        super().__post_init__()
        checks.check_seed(f"{self.name}: seed", self.seed)

    def score(self, view):
        import torch

        # within 64 bits for every seed: torch takes no larger one (the same draw as before for seeds <
        # 1.8e14)
        g = torch.Generator().manual_seed((self.seed * 100_003 + view.layer) % (1 << 64))
        return torch.rand(view.keys.shape[1:3], generator=g)
