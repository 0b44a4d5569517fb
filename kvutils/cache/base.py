"""What a cache operation is: the base class every method subclasses, its error helper, and the
quantisers the storage methods share.

An operation is a small frozen dataclass whose fields are its hyper-parameters, checked in
`__post_init__` (ValueError naming the op, the field and what is allowed). It answers four questions,
which `kvutils.cache.scoring` turns into decoding (see its docstring for the exact semantics):
- `prefill(loaded, ids)`: the prefill's K/V (exact by default; chunk reuse computes part alone);
- `keeps(slots, queries)`: whether the entry at each slot is still held when each query runs;
- `store(keys, values, slots)`: the form an entry takes once stored (cast, quantised);
- `stored_after(slots)`: the last position whose arrival completes the entry's storage group
  (the entry itself, or the end of KIVI's full-precision residual block).
The methods, one per file, are in `kvutils.cache.methods`; `kvutils.cache.registry` lists them.

Every operation states its kind (`kind`, one of `KINDS`), and the scorer dispatches on it, never on
which attributes an operation happens to have:
- `STORAGE`: decided by positions and storage alone (`keeps`, `store`, `stored_after`): exact,
  casts, quantisers, windows, chunk reuse; scored by one teacher-forced forward (`has_fast_path`);
- `PRESS`: decides once what the prefill keeps, from its queries and attention
  (`decide(views)`, `needs_views`; `kvutils.cache.methods.press`); scored by one forward;
- `POLICY`: evicts while decoding (`start(view)`, `step_many(state, weights)`;
  `kvutils.cache.methods.policy`); scored token by token on the step path;
- `CACHE_OBJECT`: a transformers cache class (`make_cache(config)`), filled through its own
  `update`; scored token by token.
A window that re-rotates its keys to their index in the cache says so in `reindexes_positions`;
the fields a method shares with others (`compression_ratio`, `window`, …) are read with `setting`.
A test checks that every registered method's kind matches what it implements.

Making an operation (its fields' checks) needs no torch: a command line parses and checks `--op`
before it imports torch and transformers (seconds), and each method imports torch inside the
functions that compute. An integer field has an upper bound that says why (`checks.check_count`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, NoReturn

if TYPE_CHECKING:
    import torch

    from kvutils.cache.prefilled import KV
    from kvutils.models.loading import Loaded


def reject(op: str, field: str, value, allowed: str) -> NoReturn:
    """ValueError: `op`'s `field` may not be `value`; `allowed` says what it may be."""
    raise ValueError(f"{op}: {field}={value!r} is not allowed; {field} must be {allowed}")


def check_fraction(op: str, field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        reject(op, field, value, "a number between 0 and 1")


STORAGE, PRESS, POLICY, CACHE_OBJECT = "storage", "press", "policy", "cache object"
KINDS = (STORAGE, PRESS, POLICY, CACHE_OBJECT)


@dataclass(frozen=True)
class CacheOp:
    """Base class; as it stands, the exact cache: every entry kept, in the model's precision, at
    its own position. Subclasses override only what they change."""

    name: ClassVar[str]
    examples: ClassVar[tuple[str, ...]]  # small settings for tests on tiny models
    transforms_storage: ClassVar[bool] = False
    exact_prefill: ClassVar[bool] = True  # starts from the exact prefill's cache (which can be shared)
    # decides from the prefill's queries/attention (kvutils.cache.methods.press)
    needs_views: ClassVar[bool] = False
    data_dependent: ClassVar[bool] = False  # what it keeps depends on the text, not only on positions
    has_fast_path: ClassVar[bool] = True  # scored exactly by one teacher-forced forward
    kind: ClassVar[str] = STORAGE  # how the scorer runs it (see the module's docstring)
    # what the book says and draws of it, each stated by the method's own class (`registry.register`
    # refuses a class that leaves one out): its family (the results' "family"), its name for a reader,
    # its colour on the charts (None: a spare colour), its place in the frontier's and the retrieval
    # test's lists (lowest first), the settings it stands at on chapter 4's frontier and in its
    # retrieval test (() for none; a press or policy in the retrieval test: ("",), the test sets its
    # budget), and `always_keeps()`
    family: ClassVar[str]
    display: ClassVar[str]
    colour: ClassVar[str | None]
    place: ClassVar[int]
    frontier: ClassVar[tuple[str, ...]]
    retrieval: ClassVar[tuple[str, ...]]

    def always_keeps(self) -> str:
        """What the method always keeps, from its own fields: the frontier's "always keeps" column."""
        raise NotImplementedError(f"{self.name} does not say what it always keeps")

    @property
    def reindexes_positions(self) -> bool:
        """Whether kept keys are re-rotated to their index in the cache (a StreamingLLM window)."""
        return False

    def setting(self, field: str, default=None):
        """The value of one of the method's hyper-parameters, or `default` where it has none."""
        return getattr(self, field) if field in {f.name for f in dataclasses.fields(self)} else default

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

    def prefill(self, loaded: Loaded, ids: torch.Tensor) -> KV:
        """Per layer (keys, values) of `ids` (1, prefill), (1, kv_heads, prefill, head_dim)."""
        from kvutils.cache.prefilled import kv_forward

        return kv_forward(loaded, ids)

    def keeps(self, slots: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
        """(queries, slots) bool: is the entry at each earlier slot still held when the query at
        each position runs? Must never turn True again once False (eviction is final)."""
        import torch

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


# --------------------------------------------------------------------------- shared by the quantisers

BITS = (2, 4, 8)
FEWER_BITS = "every entry, stored in fewer bits"  # what a cast or a quantised cache always keeps
SCALE_BYTES = 2  # a scale or zero point is counted as fp16, as quantised caches store them


def check_bits(op: str, bits) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in BITS:
        reject(op, "bits", bits, f"one of {', '.join(map(str, BITS))}")


def quantize_symmetric(x: torch.Tensor, bits: int, dim: int = -1) -> torch.Tensor:
    """Round to 2^(bits-1) - 1 signed levels each side of zero, one scale (max |x|) per slice
    along `dim`; returns the dequantised values."""
    import torch

    levels = 2 ** (bits - 1) - 1
    scale = x.abs().amax(dim, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny) / levels
    return (x / scale).round().clamp(-levels, levels) * scale


def quantize_asymmetric(x: torch.Tensor, bits: int, dim: int = -1) -> torch.Tensor:
    """Round to 2^bits levels between the slice's min and max along `dim` (scale and zero point,
    as KIVI does); returns the dequantised values."""
    import torch

    low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
    scale = ((high - low) / (2 ** bits - 1)).clamp_min(torch.finfo(x.dtype).tiny)
    return ((x - low) / scale).round() * scale + low
