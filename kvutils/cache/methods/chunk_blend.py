"""CacheBlend: a reused chunk with its most deviating tokens recomputed in context."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import check_fraction
from kvutils.cache.methods.chunk_reuse import Chunk, ChunkReuse
from kvutils.core import checks


@dataclass(frozen=True)
class ChunkBlend(Chunk):
    """CacheBlend: the reused chunk, re-indexed, with the fraction of its tokens whose values
    deviate most from the in-context ones (at layer 1, where deviation first appears) recomputed
    in context. 0 is `chunk_reuse:positions=reindexed`, 1 the exact cache."""

    recompute_fraction: float = 0.15
    chunk: int = 128
    name: ClassVar[str] = "chunk_blend"
    examples: ClassVar[tuple[str, ...]] = ("chunk_blend:recompute_fraction=0.25,chunk=8",)
    display: ClassVar[str] = "CacheBlend"
    colour: ClassVar[str | None] = None  # refused on the frontier (chapter 4 scores it in Table 2 only)
    place: ClassVar[int] = 70
    frontier: ClassVar[tuple[str, ...]] = ()
    retrieval: ClassVar[tuple[str, ...]] = ()

    def always_keeps(self):
        return (f"every entry; the reused chunk's computed without the tokens before it, then the "
                f"{self.recompute_fraction:.0%} of its tokens that deviate most recomputed in context")

    def __post_init__(self):
        check_fraction(self.name, "recompute_fraction", self.recompute_fraction)
        checks.check_count(f"{self.name}: chunk", self.chunk)

    def prefill(self, loaded, ids):
        from kvutils.cache.prefilled import kv_forward, recompute_selected

        reused = ChunkReuse("reindexed", self.chunk).prefill(loaded, ids)
        count = round(self.recompute_fraction * self.chunk)
        if count == 0:
            return reused
        context = ids.shape[-1] - self.chunk
        layer = min(1, len(reused) - 1)  # layer 0's K/V depend on the token alone
        in_context = kv_forward(loaded, ids)[layer][1][..., context:, :]
        deviation = (in_context - reused[layer][1][..., context:, :]).norm(dim=-1).sum(dim=(0, 1))  # (chunk,)
        selected = context + deviation.topk(count).indices.sort().values
        return recompute_selected(loaded, ids, reused, selected)
