"""One human name per cache operation, with its setting, for every chart, table and sentence:
"SnapKV (evicts 50 %)", "window of 800 (4 sinks)", "KIVI 4-bit", "bfloat16 cache". The spec itself
("snapkv:compression_ratio=0.5,window=64,kernel=5") stays where a reader copies it to `--op`."""
from __future__ import annotations

from kvutils.cache.registry import OPS, parse_op
from kvutils.studies.cache_approximations.frontier import STREAMING_SINKS
from kvutils.studies.cache_approximations.retrieval import QUESTION_WINDOW


def display_names() -> dict[str, str]:
    """Every registered method's name as its paper or library writes it (its class's `display`)."""
    return {name: cls.display for name, cls in OPS.items()}


def _pct(x: float) -> str:
    return f"{100 * x:.3g} %"


def human(spec: str) -> str:
    """The operation's name and setting, for a reader."""
    op = parse_op(spec)
    name = op.display
    if op.setting("compression_ratio") is not None:
        return f"{name} (evicts {_pct(op.compression_ratio)})"
    named = {
        "window": lambda: f"window of {op.size} ({op.sinks} sinks" + (", re-indexed)" if op.reindex else ")"),
        "quantize_kivi": lambda: f"KIVI {op.bits}-bit, residual {op.residual}",
        "quantize_naive": lambda: f"naive {op.bits}-bit",
        "cast": lambda: f"{op.dtype} cache",
        "hf_quantized": lambda: f"transformers {op.backend} cache",
        "chunk_reuse": lambda: f"chunk reuse, chunks of {op.chunk} ({op.positions} positions)",
        "chunk_blend": lambda: f"CacheBlend, recomputes {_pct(op.recompute_fraction)}, chunks of {op.chunk}",
    }
    return named[op.name]() if op.name in named else name


def method_name(name: str) -> str:
    """A method, by its registry name, as the charts' legends and the tables show it: its display name
    ("K-norm"), and SnapKV observing the question's tokens only (QUESTION_WINDOW) as such."""
    if name == QUESTION_WINDOW:
        return "SnapKV observing the question"
    return display_names().get(name, name)


def human_label(label: str) -> str:
    """A retrieval label ("snapkv@0.25", "window@0.25", "snapkv-question@0.25", or a precision
    spec) for a reader."""
    if "@" not in label:
        return human(label)
    name, level = label.rsplit("@", 1)
    evicts = _pct(float(level))
    if name == "window":
        return f"window with {STREAMING_SINKS} sinks (evicts {evicts} on average)"
    return f"{method_name(name)} (evicts {evicts})"
