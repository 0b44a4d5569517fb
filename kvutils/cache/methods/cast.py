"""Casting the stored keys and values to a lower floating-point precision."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import FEWER_BITS, CacheOp, reject


@dataclass(frozen=True)
class Cast(CacheOp):
    """Store keys and values in a lower precision; attention still computes in the model's."""

    dtype: str = "float16"
    name: ClassVar[str] = "cast"
    family: ClassVar[str] = "precision (cast)"
    examples: ClassVar[tuple[str, ...]] = ("cast:dtype=float16", "cast:dtype=bfloat16")
    display: ClassVar[str] = "cast"
    colour: ClassVar[str | None] = "#8c564b"
    place: ClassVar[int] = 20
    frontier: ClassVar[tuple[str, ...]] = ("dtype=bfloat16",)
    retrieval: ClassVar[tuple[str, ...]] = ("dtype=bfloat16",)

    def always_keeps(self):
        return FEWER_BITS
    transforms_storage: ClassVar[bool] = True
    # bytes per element
    DTYPES: ClassVar[dict[str, int]] = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}

    def __post_init__(self):
        if self.dtype not in self.DTYPES:
            reject(self.name, "dtype", self.dtype, f"one of {', '.join(self.DTYPES)}")

    def store(self, keys, values, slots):
        import torch

        low = getattr(torch, self.dtype)
        return keys.to(low).to(keys.dtype), values.to(low).to(values.dtype)

    def stored_bytes(self, n, kv_heads, head_dim, element_bytes):
        return 2 * n * kv_heads * head_dim * self.DTYPES[self.dtype]
