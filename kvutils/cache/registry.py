"""The cache operations, listed: `METHODS` in the order of the chapter's table, and how a spec
string names one (`parse_op("window:size=128,sinks=4")`, the CLI's `--op`). `OPS` maps a name to
its class; it drives the chapter's table, the CLI and the tests' parametrisation (`example_ops()`).
"""
from __future__ import annotations

import dataclasses
import typing

from kvutils.cache.base import CacheOp
from kvutils.cache.methods.adakv import AdaKVPress
from kvutils.cache.methods.cast import Cast
from kvutils.cache.methods.chunk_blend import ChunkBlend
from kvutils.cache.methods.chunk_reuse import ChunkReuse
from kvutils.cache.methods.exact import Exact
from kvutils.cache.methods.expected_attention import ExpectedAttentionPress
from kvutils.cache.methods.h2o import H2O
from kvutils.cache.methods.hf_quantized import HFQuantized
from kvutils.cache.methods.knorm import KnormPress
from kvutils.cache.methods.pyramidkv import PyramidKVPress
from kvutils.cache.methods.quantize_kivi import QuantizeKivi
from kvutils.cache.methods.quantize_naive import QuantizeNaive
from kvutils.cache.methods.random_press import RandomPress
from kvutils.cache.methods.snapkv import SnapKVPress
from kvutils.cache.methods.tova import TOVA
from kvutils.cache.methods.window import Window

# every operation, in the order the chapter's tables and the CLI list them
METHODS: tuple[type[CacheOp], ...] = (
    Exact, Cast, QuantizeNaive, QuantizeKivi, Window, ChunkReuse, ChunkBlend,  # by position and storage
    RandomPress, KnormPress, SnapKVPress, PyramidKVPress, ExpectedAttentionPress, AdaKVPress,  # prefill-time presses
    H2O, TOVA,  # decode-time policies
    HFQuantized,  # transformers' own cache object
)
OPS: dict[str, type[CacheOp]] = {cls.name: cls for cls in METHODS}

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
# per token (~0.05-0.3 s each on a CPU core): h2o at 0.5 only, to keep `make book` within its budget,
# tova also at 0.25, where the retrieval test scores it (its KL beside its retrieval at both levels)
FRONTIER_RATIOS = (0.25, 0.5, 0.75)
FRONTIER_OPS = ("exact", "cast:dtype=bfloat16", "quantize_kivi:bits=4", "quantize_kivi:bits=2",
                "window:size=128,sinks=4", "hf_quantized:backend=fp8",
                *(f"{name}:compression_ratio={r}" for name in ("random", "knorm", "snapkv", "expected_attention",
                                                               "pyramidkv", "adakv")
                  for r in FRONTIER_RATIOS),
                "h2o:compression_ratio=0.5", "tova:compression_ratio=0.25", "tova:compression_ratio=0.5")


def parse_op(spec: str | CacheOp) -> CacheOp:
    """"name" or "name:key=value,key=value" -> the registered dataclass; values are converted by
    the field's type and checked by the dataclass itself."""
    if isinstance(spec, CacheOp):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"op: give a name or name:key=value,...; registered: {', '.join(OPS)}")
    if ";" in spec:  # the separator of the notebooks' `ops`, not of one operation's settings
        parts = [part.strip() for part in spec.split(";") if part.strip()]
        raise ValueError(f"op: {spec.strip()!r} holds more than one operation (';' separates operations only in a "
                         "notebook's ops parameter); give each on its own: on the command line, repeat --op, e.g. "
                         + " ".join(f"--op '{part}'" for part in parts))
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
