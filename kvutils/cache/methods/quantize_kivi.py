"""KIVI: keys quantised per channel in blocks, values per token, each behind a full-precision residual."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import FEWER_BITS, SCALE_BYTES, CacheOp, check_bits, quantize_asymmetric, reject
from kvutils.core import checks
from kvutils.models.layers import kv_shape


@dataclass(frozen=True)
class QuantizeKivi(CacheOp):
    """KIVI (Liu et al. 2024, arXiv:2402.02750), as its reference code (jy-yuan/KIVI,
    quant/new_pack.py and models/llama_kivi.py) does it: asymmetric min/max rounding to 2^bits
    levels. Keys per channel over groups of `group` tokens, in blocks of `residual` tokens counted
    from position 0: a block stays in full precision until its last token has arrived, then is
    quantised whole. Values per token over groups of `group` channels; the full-precision residual
    of values is a sliding window: the value of token s is quantised once the query at s + residual
    has read it. Differences from the reference: a group whose values are all equal gets a tiny
    scale (the reference divides 0 by 0), and scales, zero points and dequantised values stay in the
    model's dtype (the reference's are fp16, its model's dtype)."""

    bits: int = 4
    group: int = 32
    residual: int = 128
    name: ClassVar[str] = "quantize_kivi"
    family: ClassVar[str] = "quantisation"
    examples: ClassVar[tuple[str, ...]] = ("quantize_kivi:bits=2,group=4,residual=8",)
    display: ClassVar[str] = "KIVI"
    colour: ClassVar[str | None] = "#17becf"
    place: ClassVar[int] = 40
    frontier: ClassVar[tuple[str, ...]] = ("bits=4", "bits=2")
    retrieval: ClassVar[tuple[str, ...]] = ("bits=4", "bits=2")

    def always_keeps(self):
        return FEWER_BITS
    transforms_storage: ClassVar[bool] = True

    def __post_init__(self):
        check_bits(self.name, self.bits)
        checks.check_count(f"{self.name}: group", self.group)
        checks.check_count(f"{self.name}: residual", self.residual)
        if self.residual % self.group:
            reject(self.name, "residual", self.residual, f"a multiple of group={self.group}")

    def check_model(self, config):
        head_dim = kv_shape(config)[1]
        if head_dim % self.group:
            reject(self.name, "group", self.group, f"a divisor of the head dimension {head_dim} (values are "
                   "quantised in groups of `group` channels)")

    def stored_after(self, slots):
        return (slots // self.residual + 1) * self.residual - 1

    def values_stored_after(self, slots):
        return slots + self.residual

    def store_keys(self, keys, slots):
        import torch

        if int(slots[0]) % self.group or not torch.equal(slots, torch.arange(int(slots[0]),
                                                                             int(slots[0]) + len(slots))):
            raise ValueError(f"{self.name}: stores whole groups of {self.group} contiguous tokens")
        seq, whole = keys.shape[-2], keys.shape[-2] // self.group * self.group
        parts = []
        if whole:
            grouped = keys[..., :whole, :].unflatten(-2, (whole // self.group, self.group))
            parts.append(quantize_asymmetric(grouped, self.bits, dim=-2).flatten(-3, -2))
        if seq > whole:  # a partial group: never read in stored form (its block is not complete)
            parts.append(quantize_asymmetric(keys[..., whole:, :], self.bits, dim=-2))
        return torch.cat(parts, dim=-2)

    def store_values(self, values, slots):
        d = values.shape[-1]
        if d % self.group:
            reject(self.name, "group", self.group,
                   f"a divisor of the head dimension {d} (values are quantised in "
                   "groups of `group` channels)")
        grouped = values.unflatten(-1, (d // self.group, self.group))
        return quantize_asymmetric(grouped, self.bits, dim=-1).flatten(-2)

    def store(self, keys, values, slots):
        return self.store_keys(keys, slots), self.store_values(values, slots)

    def stored_key_bytes(self, n, kv_heads, head_dim, element_bytes):
        return n * kv_heads * head_dim * self.bits / 8 + math.ceil(
            n / self.group) * kv_heads * head_dim * 2 * SCALE_BYTES

    def stored_value_bytes(self, n, kv_heads, head_dim, element_bytes):
        return n * kv_heads * (head_dim * self.bits / 8 + math.ceil(head_dim / self.group) * 2 * SCALE_BYTES)
