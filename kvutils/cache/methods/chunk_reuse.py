"""Chunk reuse: the prefill's last tokens are a chunk whose cache was computed without its context."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import CacheOp, reject
from kvutils.core import checks


class Chunk(CacheOp):
    """The last `chunk` prefill tokens are a reused chunk, its cache computed without the
    tokens before it (at positions 0..chunk-1)."""

    exact_prefill: ClassVar[bool] = False
    family: ClassVar[str] = "chunk reuse"

    def check_lengths(self, prefill, decode):
        if self.chunk >= prefill:
            reject(self.name, "chunk", self.chunk,
                   f"smaller than prefill={prefill} (a context must precede it)")

    def _alone(self, loaded, ids):
        """(the context's length, the chunk's K/V computed alone)."""
        from kvutils.cache.prefilled import kv_forward

        context = ids.shape[-1] - self.chunk
        return context, kv_forward(loaded, ids[:, context:])


@dataclass(frozen=True)
class ChunkReuse(Chunk):
    """A reused chunk, its keys left at positions 0..chunk-1 ("original", the stale positions of
    its own computation) or re-rotated to where it now sits ("reindexed")."""

    positions: str = "reindexed"
    chunk: int = 128
    name: ClassVar[str] = "chunk_reuse"
    examples: ClassVar[tuple[str, ...]] = ("chunk_reuse:positions=original,chunk=8",
                                           "chunk_reuse:positions=reindexed,chunk=8")
    display: ClassVar[str] = "chunk reuse"
    colour: ClassVar[str | None] = None  # refused on the frontier (chapter 4 scores it in Table 2 only)
    place: ClassVar[int] = 60
    frontier: ClassVar[tuple[str, ...]] = ()
    retrieval: ClassVar[tuple[str, ...]] = ()

    def always_keeps(self):
        return "every entry; the reused chunk's computed without the tokens before it"

    def __post_init__(self):
        if self.positions not in ("original", "reindexed"):
            reject(self.name, "positions", self.positions, "'original' or 'reindexed'")
        checks.check_count(f"{self.name}: chunk", self.chunk)

    def prefill(self, loaded, ids):
        import torch

        from kvutils.cache.prefilled import kv_forward
        from kvutils.models.rotary import rotate_keys

        context, alone = self._alone(loaded, ids)
        exact = kv_forward(loaded, ids[:, :context])
        out = []
        for i, ((k0, v0), (k1, v1)) in enumerate(zip(exact, alone)):
            if self.positions == "reindexed":
                k1 = rotate_keys(loaded, i, k1, context)
            out.append((torch.cat([k0, k1], -2), torch.cat([v0, v1], -2)))
        return out
