"""The exact cache: what every other operation is measured against."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import CacheOp


@dataclass(frozen=True)
class Exact(CacheOp):
    """The exact cache, the reference every other operation is measured against."""

    name: ClassVar[str] = "exact"
    examples: ClassVar[tuple[str, ...]] = ("exact",)
    family: ClassVar[str] = "exact"
    display: ClassVar[str] = "exact cache"
    colour: ClassVar[str | None] = "black"
    place: ClassVar[int] = 10
    frontier: ClassVar[tuple[str, ...]] = ("",)  # the reference every point is measured against
    retrieval: ClassVar[tuple[str, ...]] = ()  # the test's reference: always scored

    def always_keeps(self):
        return "every entry"
