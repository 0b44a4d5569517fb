"""A sliding window with attention sinks (StreamingLLM when its keys are re-indexed)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import CacheOp, reject
from kvutils.core import checks


@dataclass(frozen=True)
class Window(CacheOp):
    """Keep the first `sinks` tokens and the most recent `size - sinks`: before every query the
    cache holds at most `size` entries. `reindex=False` leaves keys at their original positions
    (the article's); `reindex=True` re-rotates them to their index in the cache (StreamingLLM)."""

    size: int = 128
    sinks: int = 4
    reindex: bool = False
    name: ClassVar[str] = "window"
    family: ClassVar[str] = "window (position-based eviction)"
    examples: ClassVar[tuple[str, ...]] = ("window:size=10,sinks=2", "window:size=10,sinks=0",
                                           "window:size=10,sinks=2,reindex=true")
    display: ClassVar[str] = "window"
    colour: ClassVar[str | None] = "#bcbd22"  # the charts call it "streaming window"
    place: ClassVar[int] = 50
    frontier: ClassVar[tuple[str, ...]] = ("size=128,sinks=4",)  # + one matched to each press level
    retrieval: ClassVar[tuple[str, ...]] = ()  # the study adds a 4-sink window matched to each budget level

    def always_keeps(self):
        return (f"the first {self.sinks} tokens (sinks) and the most recent ones, up to its size "
                "(StreamingLLM keeps 4 sinks)")

    @property
    def reindexes_positions(self) -> bool:
        return self.reindex

    def __post_init__(self):
        checks.check_count(f"{self.name}: size", self.size)
        checks.check_count(f"{self.name}: sinks", self.sinks, 0)
        if self.sinks >= self.size:
            reject(self.name, "sinks", self.sinks, f"smaller than size={self.size}")
        if not isinstance(self.reindex, bool):
            reject(self.name, "reindex", self.reindex, "true or false")

    def check_lengths(self, prefill, decode):
        if self.size >= prefill + decode - 1:
            warnings.warn(f"{self.spec}: size {self.size} >= prefill + decode - 1 = {prefill + decode - 1}, "
                          "so the window evicts nothing (it equals the exact cache)", stacklevel=2)

    def keeps(self, slots, queries):
        recent = slots[None, :] >= queries[:, None] - (self.size - self.sinks)
        return recent | (slots[None, :] < self.sinks)
