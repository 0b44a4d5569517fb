"""transformers' own quantized KV caches as black-box rows: the real `QuantizedCache` object does
the storing, the model reads it through its ordinary cached forward, one token at a time (the step
path), and the bytes are those of the tensors the cache object holds."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import CACHE_OBJECT, FEWER_BITS, CacheOp, reject
from kvutils.core import checks
from kvutils.models.layers import layer_types

BACKENDS = ("fp8", "quanto", "hqq")
_PACKAGES = {"quanto": "optimum.quanto", "hqq": "hqq"}


def backend_missing(backend: str) -> str | None:
    """Why a backend cannot run here, or None."""
    package = _PACKAGES.get(backend)
    if package is None:
        return None
    try:
        found = importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:
        found = False
    return None if found else (f"hf_quantized: backend={backend} needs the {package.split('.')[-1]!r} "
                               f"package ({'optimum-quanto' if backend == 'quanto' else 'hqq'} on PyPI), not "
                               "installed here")


def refusal(config, op: HFQuantized) -> str | None:
    """Why transformers' QuantizedCache refuses this model (it takes only full-attention layers)."""
    kinds = set(layer_types(config))
    if kinds - {"full_attention"}:
        others = " and ".join(kind.replace("_", "-") for kind in sorted(kinds - {"full_attention"}))
        return (f"transformers' QuantizedCache refuses models with {others} layers (only full attention is "
                "supported)")
    return backend_missing(op.backend)


@dataclass(frozen=True)
class HFQuantized(CacheOp):
    """transformers' QuantizedCache, the real object: `fp8` stores keys and values as float8_e4m3
    with one scale per layer and tensor, fixed by the prefill (native in transformers >= 5.24);
    `quanto` / `hqq` quantise to `nbits` in groups of `group` channels with a full-precision
    residual of up to `residual` tokens (KIVI-like). Scored on the step path; models with
    sliding-window layers are refused by the cache (the row names them)."""

    backend: str = "fp8"
    nbits: int = 4
    group: int = 64
    residual: int = 128
    name: ClassVar[str] = "hf_quantized"
    family: ClassVar[str] = "transformers QuantizedCache"
    examples: ClassVar[tuple[str, ...]] = ("hf_quantized:backend=fp8",)
    display: ClassVar[str] = "transformers"
    colour: ClassVar[str | None] = "navy"
    place: ClassVar[int] = 80
    frontier: ClassVar[tuple[str, ...]] = ("backend=fp8",)
    retrieval: ClassVar[tuple[str, ...]] = ()

    def always_keeps(self):
        return FEWER_BITS
    has_fast_path: ClassVar[bool] = False
    data_dependent: ClassVar[bool] = True  # its bytes are read off the real cache object
    kind: ClassVar[str] = CACHE_OBJECT

    def __post_init__(self):
        if self.backend not in BACKENDS:
            reject(self.name, "backend", self.backend, f"one of {', '.join(BACKENDS)}")
        checks.check_int(f"{self.name}: nbits", self.nbits, 1, 8,
                         "quanto and hqq store at most 8 bits a value")
        checks.check_count(f"{self.name}: group", self.group)
        checks.check_count(f"{self.name}: residual", self.residual)
        missing = backend_missing(self.backend)  # when the op is parsed, not after a model loaded
        if missing:
            raise ValueError(missing)

    @property
    def spec(self) -> str:
        if self.backend == "fp8":  # per-tensor: the group-wise settings do not apply
            return f"{self.name}:backend=fp8"
        return (f"{self.name}:backend={self.backend},nbits={self.nbits},group={self.group},"
                f"residual={self.residual}")

    def make_cache(self, config):
        from transformers.cache_utils import QuantizedCache

        why = refusal(config, self)
        if why:
            raise ValueError(why)
        if self.backend == "fp8":
            return QuantizedCache("fp8", config)
        return QuantizedCache(self.backend, config, nbits=self.nbits, q_group_size=self.group,
                              residual_length=self.residual)

