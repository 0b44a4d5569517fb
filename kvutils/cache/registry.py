"""The cache operations, listed: `METHODS` in the order of the chapter's table, and how a spec
string names one (`parse_op("window:size=128,sinks=4")`, the CLI's `--op`). `OPS` maps a name to
its class; it drives the chapter's table, the CLI and the tests' parametrisation (`example_ops()`).

Each method's class states what the book says and draws of it (`kvutils.cache.base.CacheOp`: its
family, `display` name, `colour`, `place`, `frontier` and `retrieval` settings, `always_keeps()`);
`register` refuses a class that leaves one out, and every list of the book derives from them here:
`frontier_ops()` (chapter 4's default frontier), `retrieval_fixed()` and `retrieval_swept(kind)`
(its retrieval test). `registered(cls)` adds a method for the length of a `with` block.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import typing

from kvutils.cache.base import POLICY, PRESS, CacheOp
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

# the operations, registered in this order (the chapter's tables' and the CLI's); `register` adds others after
METHODS: tuple[type[CacheOp], ...] = (
    Exact, Cast, QuantizeNaive, QuantizeKivi, Window, ChunkReuse, ChunkBlend,  # by position and storage
    # prefill-time presses
    RandomPress, KnormPress, SnapKVPress, PyramidKVPress, ExpectedAttentionPress, AdaKVPress,
    H2O, TOVA,  # decode-time policies
    HFQuantized,  # transformers' own cache object
)
OPS: dict[str, type[CacheOp]] = {}  # filled by `register`, below

# the article's Table 2, in its order (its chunk rows use prefill 256 = 128 + 128 and decode 64)
ARTICLE_OPS = ("exact", "cast:dtype=float16", "cast:dtype=bfloat16", "quantize_naive:bits=8",
               "quantize_naive:bits=4", "quantize_naive:bits=2", "window:size=128,sinks=4",
               "window:size=128,sinks=0", "window:size=64,sinks=4", "window:size=64,sinks=0",
               "chunk_reuse:positions=reindexed", "chunk_reuse:positions=original")
# the rows this book adds: outlier-aware quantisation, re-indexed windows, partial recompute
EXTRA_OPS = ("quantize_kivi:bits=8", "quantize_kivi:bits=4", "quantize_kivi:bits=2",
             "window:size=128,sinks=4,reindex=true", "window:size=64,sinks=4,reindex=true",
             "chunk_blend:recompute_fraction=0.15", "chunk_blend:recompute_fraction=0.5")

# what each registered class states itself (an inherited one would name, colour or place it as its parent)
OWN = ("name", "examples", "display", "colour", "place", "frontier", "retrieval")
BUDGETED = (PRESS, POLICY)  # kinds the retrieval test sweeps over its budget levels


def register(cls: type[CacheOp]) -> type[CacheOp]:
    """Add a method to the registry (after the others), or raise TypeError naming what it lacks or
    shares with a registered one: every list of the book then includes it."""
    missing = [attr for attr in OWN if attr not in vars(cls)]
    missing += [] if hasattr(cls, "family") else ["family"]
    missing += ["always_keeps()"] if cls.always_keeps is CacheOp.always_keeps else []
    if missing:
        raise TypeError(f"{cls.__name__}: a cache method states {', '.join(missing)} in its own class "
                        "(see kvutils/cache/base.py and CONTRIBUTING.md, 'Add a cache method')")
    for attr in ("name", "display", "colour", "place"):
        twin = next((o for o in OPS.values() if getattr(cls, attr) is not None
                     and getattr(o, attr) == getattr(cls, attr)), None)
        if twin is not None:
            raise TypeError(f"{cls.__name__}: {attr}={getattr(cls, attr)!r} is already {twin.__name__}'s")
    if cls.kind in BUDGETED and cls.retrieval not in ((), ("",)):
        raise TypeError(f"{cls.__name__}: retrieval={cls.retrieval!r}; a {cls.kind} is swept over the "
                        "retrieval test's budget levels at its defaults: give () or (\"\",)")
    OPS[cls.name] = cls
    try:  # each spec it states parses, and says what it keeps
        for spec in (*cls.examples, *(_spec(cls.name, s) for s in cls.frontier + cls.retrieval)):
            parse_op(spec).always_keeps()
    except Exception:
        del OPS[cls.name]
        raise
    return cls


@contextlib.contextmanager
def registered(cls: type[CacheOp]):
    """`with registered(MyPress): ...`: the method is registered inside the block only."""
    register(cls)
    try:
        yield cls
    finally:
        del OPS[cls.name]


def _spec(name: str, settings: str) -> str:
    return f"{name}:{settings}" if settings else name


def by_place() -> list[type[CacheOp]]:
    """The registered methods in the order of the frontier and the retrieval test (`place`)."""
    return sorted(OPS.values(), key=lambda cls: cls.place)


def frontier_ops() -> tuple[str, ...]:
    """Chapter 4's default frontier, the methods people deploy: each at the settings its class states in
    `frontier` (a press at `methods.press.FRONTIER_RATIOS`), in `place` order, on every frontier model."""
    return tuple(_spec(cls.name, s) for cls in by_place() for s in cls.frontier)


def retrieval_fixed() -> tuple[str, ...]:
    """The retrieval test's rows scored as written (casts, quantisers): each method's `retrieval` settings."""
    return tuple(_spec(cls.name, s) for cls in by_place() if cls.kind not in BUDGETED for s in cls.retrieval)


def retrieval_swept(kind: str) -> tuple[str, ...]:
    """The names of the presses (kind PRESS) or policies (POLICY) the retrieval test scores at each level."""
    return tuple(cls.name for cls in by_place() if cls.kind == kind and cls.retrieval)


def parse_op(spec: str | CacheOp) -> CacheOp:
    """"name" or "name:key=value,key=value" -> the registered dataclass; values are converted by
    the field's type and checked by the dataclass itself."""
    if isinstance(spec, CacheOp):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"op: give a name or name:key=value,...; registered: {', '.join(OPS)}")
    if ";" in spec:  # the separator of the notebooks' `ops`, not of one operation's settings
        parts = [part.strip() for part in spec.split(";") if part.strip()]
        raise ValueError(f"op: {spec.strip()!r} holds more than one operation (';' separates operations only "
                         "in a notebook's ops parameter); give each on its own: on the command line, repeat "
                         "--op, e.g. "
                         + " ".join(f"--op '{part}'" for part in parts))
    name, _, args = spec.strip().partition(":")
    if name not in OPS:
        raise ValueError(f"op: unknown operation {name!r}; registered: {', '.join(OPS)}")
    cls = OPS[name]
    types = field_types(cls)
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


PLAIN_TYPES = {kind.__name__: kind for kind in (int, float, str, bool)}


@functools.cache
def field_types(cls: type[CacheOp]) -> dict[str, type]:
    """Each field's type, once per class (`register` parses every method's settings at import): a
    plain type read off its name, anything else through typing's evaluation of the annotations."""
    written = {f.name: f.type for f in dataclasses.fields(cls)}
    if all(isinstance(t, type) or t in PLAIN_TYPES for t in written.values()):
        return {name: PLAIN_TYPES.get(t, t) for name, t in written.items()}
    return typing.get_type_hints(cls)


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


for _method in METHODS:
    register(_method)
