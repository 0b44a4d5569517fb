"""Cache operations: what a serving system may do to the KV cache, one small dataclass each.

Each operation's fields are its hyper-parameters, checked in `__post_init__` (ValueError naming
the field and what is allowed). `OPS` maps a name to its class; it drives the chapter's table, the
CLI (`parse_op("window:size=128,sinks=4")`) and the tests' parametrisation (`example_ops()`).

An operation answers four questions, which `kvutils.cache.scoring` turns into decoding (see its
docstring for the exact semantics):
- `prefill(loaded, ids)`: the prefill's K/V (exact by default; chunk reuse computes part alone);
- `keeps(slots, queries)`: whether the entry at each slot is still held when each query runs;
- `store(keys, values, slots)`: the form an entry takes once stored (cast, quantised);
- `stored_after(slots)`: the last position whose arrival completes the entry's storage group
  (the entry itself, or the end of KIVI's full-precision residual block).
"""
from __future__ import annotations

import dataclasses
import math
import typing
import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch

from kvutils.cache import scoring as teacher
from kvutils.models.loading import Loaded
from kvutils.models.rotary import rotate_keys

OPS: dict[str, type[CacheOp]] = {}

# the article's Table 2, in its order (its chunk rows use prefill 256 = 128 + 128 and decode 64)
ARTICLE_OPS = ("exact", "cast:dtype=float16", "cast:dtype=bfloat16", "quantize_naive:bits=8",
               "quantize_naive:bits=4", "quantize_naive:bits=2", "window:size=128,sinks=4",
               "window:size=128,sinks=0", "window:size=64,sinks=4", "window:size=64,sinks=0",
               "chunk_reuse:positions=reindexed", "chunk_reuse:positions=original")
# the rows this book adds: outlier-aware quantisation, re-indexed windows, partial recompute
EXTRA_OPS = ("quantize_kivi:bits=8", "quantize_kivi:bits=4", "quantize_kivi:bits=2",
             "window:size=128,sinks=4,reindex=true", "window:size=64,sinks=4,reindex=true",
             "chunk_blend:recompute_fraction=0.05", "chunk_blend:recompute_fraction=0.15",
             "chunk_blend:recompute_fraction=0.3", "chunk_blend:recompute_fraction=0.5")

# chapter 4's frontier: the methods people deploy, each press swept over three budgets, on every
# model of `frontier_models`. The decode-time policies and the transformers cache run one forward
# per token (~0.05-0.3 s each on a CPU core): at 0.5 only, to keep `make book` within its budget
FRONTIER_RATIOS = (0.25, 0.5, 0.75)
FRONTIER_OPS = ("exact", "cast:dtype=bfloat16", "quantize_kivi:bits=4", "quantize_kivi:bits=2",
                "window:size=128,sinks=4", "hf_quantized:backend=fp8",
                *(f"{name}:compression_ratio={r}" for name in ("random", "knorm", "snapkv", "expected_attention",
                                                               "pyramidkv", "adakv")
                  for r in FRONTIER_RATIOS),
                "h2o:compression_ratio=0.5", "tova:compression_ratio=0.5")


def register(cls: type[CacheOp]) -> type[CacheOp]:
    OPS[cls.name] = cls
    return cls


def _fail(op: str, field: str, value, allowed: str):
    raise ValueError(f"{op}: {field}={value!r} is not allowed; {field} must be {allowed}")


def _check_int(op: str, field: str, value, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        _fail(op, field, value, f"an integer >= {low}")


@dataclass(frozen=True)
class CacheOp:
    """Base class; as it stands, the exact cache: every entry kept, in the model's precision, at
    its own position. Subclasses override only what they change."""

    name: ClassVar[str]
    examples: ClassVar[tuple[str, ...]]  # small settings for tests on tiny models
    transforms_storage: ClassVar[bool] = False
    exact_prefill: ClassVar[bool] = True  # starts from the exact prefill's cache (which can be shared)
    needs_views: ClassVar[bool] = False  # decides from the prefill's queries/attention (kvutils.cache.presses)
    data_dependent: ClassVar[bool] = False  # what it keeps depends on the text, not only on positions
    has_fast_path: ClassVar[bool] = True  # scored exactly by one teacher-forced forward
    family: ClassVar[str] = "exact"  # colours the frontier chart

    @property
    def spec(self) -> str:
        """The op as the CLI names it, e.g. "window:size=128,sinks=4,reindex=false"."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if not values:
            return self.name
        args = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items())
        return f"{self.name}:{args}"

    def check_lengths(self, prefill: int, decode: int) -> None:
        """Reject (or warn about) settings that make no sense for these lengths."""

    def check_model(self, config) -> None:
        """Reject settings that do not fit the model's shapes (ValueError naming the field)."""

    def prefill(self, loaded: Loaded, ids: torch.Tensor) -> teacher.KV:
        """Per layer (keys, values) of `ids` (1, prefill), (1, kv_heads, prefill, head_dim)."""
        return teacher.kv_forward(loaded, ids)

    def keeps(self, slots: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(queries, slots) bool: is the entry at each earlier slot still held when the query at
        each position runs? Must never turn True again once False (eviction is final)."""
        return torch.ones(len(queries), len(slots), dtype=torch.bool)

    def store(self, keys: torch.Tensor, values: torch.Tensor, slots: torch.Tensor):
        """Stored form of complete storage groups: keys/values (batch, kv_heads, n, head_dim) at
        document positions `slots` (n,), returned in the same shape and dtype (dequantised)."""
        return keys, values

    def store_keys(self, keys: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        return self.store(keys, keys, slots)[0]

    def store_values(self, values: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        return self.store(values, values, slots)[1]

    def stored_after(self, slots: torch.Tensor) -> torch.Tensor:
        """(n,): the key is read in stored form by queries after this position, fresh before."""
        return slots

    def values_stored_after(self, slots: torch.Tensor) -> torch.Tensor:
        """(n,): the same for the value (KIVI's differ: a block for keys, a sliding window for values)."""
        return self.stored_after(slots)

    def stored_bytes(self, n: int, kv_heads: int, head_dim: int, element_bytes: int) -> float:
        """Bytes of `n` stored entries (keys and values) of one layer."""
        return 2 * n * kv_heads * head_dim * element_bytes

    def stored_key_bytes(self, n: int, kv_heads: int, head_dim: int, element_bytes: int) -> float:
        return self.stored_bytes(n, kv_heads, head_dim, element_bytes) / 2

    def stored_value_bytes(self, n: int, kv_heads: int, head_dim: int, element_bytes: int) -> float:
        return self.stored_bytes(n, kv_heads, head_dim, element_bytes) / 2


@register
@dataclass(frozen=True)
class Exact(CacheOp):
    """The exact cache, the reference every other operation is measured against."""

    name: ClassVar[str] = "exact"
    examples: ClassVar[tuple[str, ...]] = ("exact",)


@register
@dataclass(frozen=True)
class Cast(CacheOp):
    """Store keys and values in a lower precision; attention still computes in the model's."""

    dtype: str = "float16"
    name: ClassVar[str] = "cast"
    family: ClassVar[str] = "precision (cast)"
    examples: ClassVar[tuple[str, ...]] = ("cast:dtype=float16", "cast:dtype=bfloat16")
    transforms_storage: ClassVar[bool] = True
    DTYPES: ClassVar[dict] = {"float16": torch.float16, "bfloat16": torch.bfloat16,
                              "float32": torch.float32, "float64": torch.float64}

    def __post_init__(self):
        if self.dtype not in self.DTYPES:
            _fail(self.name, "dtype", self.dtype, f"one of {', '.join(self.DTYPES)}")

    def store(self, keys, values, slots):
        low = self.DTYPES[self.dtype]
        return keys.to(low).to(keys.dtype), values.to(low).to(values.dtype)

    def stored_bytes(self, n, kv_heads, head_dim, element_bytes):
        return 2 * n * kv_heads * head_dim * self.DTYPES[self.dtype].itemsize


def quantize_symmetric(x: torch.Tensor, bits: int, dim: int = -1) -> torch.Tensor:
    """Round to 2^(bits-1) - 1 signed levels each side of zero, one scale (max |x|) per slice
    along `dim`; returns the dequantised values."""
    levels = 2 ** (bits - 1) - 1
    scale = x.abs().amax(dim, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny) / levels
    return (x / scale).round().clamp(-levels, levels) * scale


def quantize_asymmetric(x: torch.Tensor, bits: int, dim: int = -1) -> torch.Tensor:
    """Round to 2^bits levels between the slice's min and max along `dim` (scale and zero point,
    as KIVI does); returns the dequantised values."""
    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = ((high - low) / (2 ** bits - 1)).clamp_min(torch.finfo(x.dtype).tiny)
    return ((x - low) / scale).round() * scale + low


BITS = (2, 4, 8)
SCALE_BYTES = 2  # a scale or zero point is counted as fp16, as quantised caches store them


@register
@dataclass(frozen=True)
class QuantizeNaive(CacheOp):
    """The article's quantiser: symmetric, one scale per token and head for keys and values."""

    bits: int = 8
    name: ClassVar[str] = "quantize_naive"
    family: ClassVar[str] = "quantisation"
    examples: ClassVar[tuple[str, ...]] = ("quantize_naive:bits=4",)
    transforms_storage: ClassVar[bool] = True

    def __post_init__(self):
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or self.bits not in BITS:
            _fail(self.name, "bits", self.bits, f"one of {', '.join(map(str, BITS))}")

    def store(self, keys, values, slots):
        return quantize_symmetric(keys, self.bits), quantize_symmetric(values, self.bits)

    def stored_bytes(self, n, kv_heads, head_dim, element_bytes):
        return 2 * n * kv_heads * (head_dim * self.bits / 8 + SCALE_BYTES)


@register
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
    transforms_storage: ClassVar[bool] = True

    def __post_init__(self):
        if isinstance(self.bits, bool) or not isinstance(self.bits, int) or self.bits not in BITS:
            _fail(self.name, "bits", self.bits, f"one of {', '.join(map(str, BITS))}")
        _check_int(self.name, "group", self.group, 1)
        _check_int(self.name, "residual", self.residual, 1)
        if self.residual % self.group:
            _fail(self.name, "residual", self.residual, f"a multiple of group={self.group}")

    def check_model(self, config):
        head_dim = kv_shape(config)[1]
        if head_dim % self.group:
            _fail(self.name, "group", self.group, f"a divisor of the head dimension {head_dim} (values are "
                  "quantised in groups of `group` channels)")

    def stored_after(self, slots):
        return (slots // self.residual + 1) * self.residual - 1

    def values_stored_after(self, slots):
        return slots + self.residual

    def store_keys(self, keys, slots):
        if int(slots[0]) % self.group or not torch.equal(slots, torch.arange(int(slots[0]), int(slots[0]) + len(slots))):
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
            _fail(self.name, "group", self.group, f"a divisor of the head dimension {d} (values are quantised in "
                  "groups of `group` channels)")
        grouped = values.unflatten(-1, (d // self.group, self.group))
        return quantize_asymmetric(grouped, self.bits, dim=-1).flatten(-2)

    def store(self, keys, values, slots):
        return self.store_keys(keys, slots), self.store_values(values, slots)

    def stored_key_bytes(self, n, kv_heads, head_dim, element_bytes):
        return n * kv_heads * head_dim * self.bits / 8 + math.ceil(n / self.group) * kv_heads * head_dim * 2 * SCALE_BYTES

    def stored_value_bytes(self, n, kv_heads, head_dim, element_bytes):
        return n * kv_heads * (head_dim * self.bits / 8 + math.ceil(head_dim / self.group) * 2 * SCALE_BYTES)


@register
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

    def __post_init__(self):
        _check_int(self.name, "size", self.size, 1)
        _check_int(self.name, "sinks", self.sinks, 0)
        if self.sinks >= self.size:
            _fail(self.name, "sinks", self.sinks, f"smaller than size={self.size}")
        if not isinstance(self.reindex, bool):
            _fail(self.name, "reindex", self.reindex, "true or false")

    def check_lengths(self, prefill, decode):
        if self.size >= prefill + decode - 1:
            warnings.warn(f"{self.spec}: size {self.size} >= prefill + decode - 1 = {prefill + decode - 1}, "
                          "so the window evicts nothing (it equals the exact cache)", stacklevel=2)

    def keeps(self, slots, queries):
        recent = slots[None, :] >= queries[:, None] - (self.size - self.sinks)
        return recent | (slots[None, :] < self.sinks)


class _Chunk(CacheOp):
    """The last `chunk` prefill tokens are a reused chunk, its cache computed without the
    tokens before it (at positions 0..chunk-1)."""

    exact_prefill: ClassVar[bool] = False
    family: ClassVar[str] = "chunk reuse"

    def check_lengths(self, prefill, decode):
        if self.chunk >= prefill:
            _fail(self.name, "chunk", self.chunk, f"smaller than prefill={prefill} (a context must precede it)")

    def _alone(self, loaded, ids):
        context = ids.shape[-1] - self.chunk
        return context, teacher.kv_forward(loaded, ids[:, context:])


@register
@dataclass(frozen=True)
class ChunkReuse(_Chunk):
    """A reused chunk, its keys left at positions 0..chunk-1 ("original", the stale positions of
    its own computation) or re-rotated to where it now sits ("reindexed")."""

    positions: str = "reindexed"
    chunk: int = 128
    name: ClassVar[str] = "chunk_reuse"
    examples: ClassVar[tuple[str, ...]] = ("chunk_reuse:positions=original,chunk=8",
                                           "chunk_reuse:positions=reindexed,chunk=8")

    def __post_init__(self):
        if self.positions not in ("original", "reindexed"):
            _fail(self.name, "positions", self.positions, "'original' or 'reindexed'")
        _check_int(self.name, "chunk", self.chunk, 1)

    def prefill(self, loaded, ids):
        context, alone = self._alone(loaded, ids)
        exact = teacher.kv_forward(loaded, ids[:, :context])
        out = []
        for i, ((k0, v0), (k1, v1)) in enumerate(zip(exact, alone)):
            if self.positions == "reindexed":
                k1 = rotate_keys(loaded, i, k1, context)
            out.append((torch.cat([k0, k1], -2), torch.cat([v0, v1], -2)))
        return out


@register
@dataclass(frozen=True)
class ChunkBlend(_Chunk):
    """CacheBlend: the reused chunk, re-indexed, with the fraction of its tokens whose values
    deviate most from the in-context ones (at layer 1, where deviation first appears) recomputed
    in context. 0 is `chunk_reuse:positions=reindexed`, 1 the exact cache."""

    recompute_fraction: float = 0.15
    chunk: int = 128
    name: ClassVar[str] = "chunk_blend"
    examples: ClassVar[tuple[str, ...]] = ("chunk_blend:recompute_fraction=0.25,chunk=8",)

    def __post_init__(self):
        f = self.recompute_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0:
            _fail(self.name, "recompute_fraction", f, "a number between 0 and 1")
        _check_int(self.name, "chunk", self.chunk, 1)

    def prefill(self, loaded, ids):
        reused = ChunkReuse("reindexed", self.chunk).prefill(loaded, ids)
        count = round(self.recompute_fraction * self.chunk)
        if count == 0:
            return reused
        context = ids.shape[-1] - self.chunk
        layer = min(1, len(reused) - 1)  # layer 0's K/V depend on the token alone
        in_context = teacher.kv_forward(loaded, ids)[layer][1][..., context:, :]
        deviation = (in_context - reused[layer][1][..., context:, :]).norm(dim=-1).sum(dim=(0, 1))  # (chunk,)
        selected = context + deviation.topk(count).indices.sort().values
        return teacher.recompute_selected(loaded, ids, reused, selected)


# --------------------------------------------------------------------------- naming and sizes


def parse_op(spec: str | CacheOp) -> CacheOp:
    """"name" or "name:key=value,key=value" -> the registered dataclass; values are converted by
    the field's type and checked by the dataclass itself."""
    if isinstance(spec, CacheOp):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"op: give a name or name:key=value,...; registered: {', '.join(OPS)}")
    name, _, args = spec.strip().partition(":")
    if name not in OPS:
        raise ValueError(f"op: unknown operation {name!r}; registered: {', '.join(OPS)}")
    cls = OPS[name]
    types = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for item in filter(None, (a.strip() for a in args.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in fields:
            raise ValueError(f"{name}: {item!r} is not key=value with a known key; keys: "
                             f"{', '.join(sorted(fields)) or 'none'}")
        if key in kwargs:
            raise ValueError(f"{name}: {key} is given twice in {spec.strip()!r}")
        kwargs[key] = _convert(name, key, raw.strip(), types[key])
    return cls(**kwargs)


def _convert(op: str, key: str, raw: str, kind):
    try:
        if kind is bool:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return raw.lower() in ("true", "1", "yes")
        return kind(raw)
    except ValueError:
        raise ValueError(f"{op}: {key}={raw!r} is not a valid {kind.__name__}") from None


def parse_ops(specs) -> list[CacheOp]:
    """Several ops, e.g. from repeated --op flags; the same op twice is an error."""
    ops = [parse_op(s) for s in ([specs] if isinstance(specs, (str, CacheOp)) else specs)]
    labels = [op.spec for op in ops]
    if len(set(labels)) != len(labels):
        raise ValueError(f"op: named twice in {labels}")
    return ops


def example_ops() -> list[CacheOp]:
    """Every registered operation at small settings, for `pytest.mark.parametrize`."""
    return [parse_op(spec) for cls in OPS.values() for spec in cls.examples]


def kv_shape(config) -> tuple[int, int]:
    """(kv_heads, head_dim) of a model config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return kv_heads, head_dim


def cache_bytes(config, op: CacheOp, prefill: int, dtype: torch.dtype) -> float:
    """Bytes the operation's cache holds after `prefill` tokens, all layers: evicted entries
    excluded, stored ones in their stored size, sliding-window layers at most window - 1 entries.
    (Data-dependent methods: `held_bytes` counts what they actually kept.)"""
    kv_heads, head_dim = kv_shape(config)
    slots = torch.arange(prefill)
    held = op.keeps(slots, torch.tensor([prefill]))[0]
    none = torch.zeros_like(held)
    key_done = (op.stored_after(slots) < prefill) if op.transforms_storage else none
    value_done = (op.values_stored_after(slots) < prefill) if op.transforms_storage else none
    base, e = Exact(), dtype.itemsize
    total = 0.0
    for kind in getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers:
        h = held & ((prefill - slots) < config.sliding_window) if kind == "sliding_attention" else held
        total += op.stored_key_bytes(int((h & key_done).sum()), kv_heads, head_dim, e)
        total += op.stored_value_bytes(int((h & value_done).sum()), kv_heads, head_dim, e)
        total += base.stored_key_bytes(int((h & ~key_done).sum()), kv_heads, head_dim, e)
        total += base.stored_value_bytes(int((h & ~value_done).sum()), kv_heads, head_dim, e)
    return total


def held_bytes(config, kept: list[torch.Tensor], dtype: torch.dtype) -> float:
    """Bytes of the entries a data-dependent method holds: `kept` per layer (kv_heads, n) bool over
    the document's positions 0..n-1 (sliding-window layers: only the last window - 1 count)."""
    _, head_dim = kv_shape(config)
    kinds = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    total = 0
    for kind, k in zip(kinds, kept):
        n = k.shape[-1]
        if kind == "sliding_attention":
            k = k & ((n - torch.arange(n)) < config.sliding_window)
        total += int(k.sum())
    return float(total * 2 * head_dim * dtype.itemsize)


# the data-dependent methods and the transformers caches register themselves into OPS
from kvutils.cache import presses, hf_caches  # noqa: E402,F401,I001  (this order: the registry order)
