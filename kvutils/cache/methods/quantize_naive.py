"""The article's quantiser: symmetric rounding, one scale per token and head."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import FEWER_BITS, SCALE_BYTES, CacheOp, check_bits, quantize_symmetric


@dataclass(frozen=True)
class QuantizeNaive(CacheOp):
    """The article's quantiser: symmetric, one scale per token and head for keys and values."""

    bits: int = 8
    name: ClassVar[str] = "quantize_naive"
    family: ClassVar[str] = "quantisation"
    examples: ClassVar[tuple[str, ...]] = ("quantize_naive:bits=4",)
    display: ClassVar[str] = "naive"
    colour: ClassVar[str | None] = None  # not on the frontier's default list: a spare colour where drawn
    place: ClassVar[int] = 30
    frontier: ClassVar[tuple[str, ...]] = ()
    retrieval: ClassVar[tuple[str, ...]] = ("bits=4",)

    def always_keeps(self):
        return FEWER_BITS
    transforms_storage: ClassVar[bool] = True

    def __post_init__(self):
        check_bits(self.name, self.bits)

    def store(self, keys, values, slots):
        return quantize_symmetric(keys, self.bits), quantize_symmetric(values, self.bits)

    def stored_bytes(self, n, kv_heads, head_dim, element_bytes):
        return 2 * n * kv_heads * (head_dim * self.bits / 8 + SCALE_BYTES)
