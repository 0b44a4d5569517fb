"""Chapter 4's frontier, analysed: the default methods at matched budgets, the bytes each holds on
average over the decode, the paired verdicts per budget level, and the ties that hold by
construction (found from the model's config and the operations' own parameters).

What a method holds while decoding differs by kind. A press keeps its share of the prefill and
then every decoded token on top; a decode-time policy (h2o, tova) and a position window
(StreamingLLM) hold a fixed budget. So the frontier compares them at equal *mean held bytes over
the decode*: the bytes held when each of the `decode` queries runs (its own entry aside), averaged
over the queries. A policy or window joins the press level whose mean held entries per KV head on a
full-attention layer it matches to within `MATCH_ENTRIES`; the default frontier sets their budgets
so that they do (`default_specs`).
"""
from __future__ import annotations

from types import SimpleNamespace

import torch

from kvutils.cache.base import CacheOp
from kvutils.cache.methods.adakv import AdaKVPress
from kvutils.cache.methods.policy import DecodePolicy
from kvutils.cache.methods.press import FRONTIER_RATIOS, Press, kept_per_head
from kvutils.cache.methods.pyramidkv import PyramidKVPress
from kvutils.cache.methods.snapkv import SnapKVPress
from kvutils.cache.methods.window import Window
from kvutils.cache.registry import frontier_ops, parse_op
from kvutils.cache.sizes import cache_bytes
from kvutils.core import compare
from kvutils.models.layers import kv_shape, layer_types

MATCH_ENTRIES = 1.0  # a fixed budget matches a press level when the mean held entries differ by at most this
FLIP_SHARE = 0.05  # a pairwise order "flips" when more than this share of resamples reverses it
STREAMING_SINKS = 4  # StreamingLLM's (and kvpress's StreamingLLMPress's) n_sink


def matched_budget(prefill: int, decode: int, ratio: float) -> int:
    """Entries per KV head a fixed-budget method holds to match a press at `ratio` on average over
    the decode: the press's prefill share plus half the decoded tokens."""
    return kept_per_head(prefill, ratio) + decode // 2


def default_specs(prefill: int, decode: int) -> list[str]:
    """The registry's `frontier_ops()` with each decode-time policy's ratio lowered so that its
    constant budget equals the press's mean held entries at the original ratio, plus a StreamingLLM
    window (4 sinks + recent tokens) matched to every press ratio."""
    out = []
    for spec in frontier_ops():
        op = parse_op(spec)
        budget = matched_budget(prefill, decode,
                                op.compression_ratio) if isinstance(op, DecodePolicy) else prefill
        if budget < prefill:
            spec = f"{op.name}:compression_ratio={_ratio_for(prefill, budget)}"
        out.append(spec)
    for ratio in FRONTIER_RATIOS:
        size = matched_budget(prefill, decode, ratio)
        if STREAMING_SINKS < size < prefill:
            out.append(f"window:size={size},sinks={STREAMING_SINKS}")
    return out


def matched_policy(name: str, prefill: int, decode: int, ratio: float) -> str:
    """The spec of decode-time policy `name` whose constant budget matches a press at `ratio` on
    average over the decode (`matched_budget`)."""
    return f"{name}:compression_ratio={_ratio_for(prefill, matched_budget(prefill, decode, ratio))}"


def _ratio_for(prefill: int, budget: int) -> str:
    """The shortest written compression ratio whose kvpress budget is `budget` entries."""
    for text in (f"{1 - budget / prefill:.6g}", f"{1 - (budget + 0.5) / prefill:.6g}"):
        if kept_per_head(prefill, float(text)) == budget:
            return text
    raise ValueError(f"no compression ratio keeps {budget} of {prefill} entries")


def fixed_budget(op: CacheOp, prefill: int) -> int | None:
    """Entries per KV head a decode-time policy or window holds at every decode step, else None."""
    if isinstance(op, DecodePolicy):
        return kept_per_head(prefill, op.compression_ratio)
    if isinstance(op, Window) and op.size < prefill:
        return op.size
    return None


def level(op: CacheOp, prefill: int, decode: int, ratios: list[float]) -> float | None:
    """The press compression ratio `op` is compared at: a press's own; a fixed budget's the press
    ratio (among `ratios`) whose mean held entries it matches; None when it matches none."""
    if isinstance(op, Press):
        return op.compression_ratio
    budget = fixed_budget(op, prefill)
    if budget is None:
        return None
    for r in ratios:
        if abs(kept_per_head(prefill, r) + (decode - 1) / 2 - budget) <= MATCH_ENTRIES:
            return r
    return None


def mean_held_bytes(config, op: CacheOp, held_after_prefill: float, prefill: int, decode: int,
                    dtype: torch.dtype) -> float:
    """Bytes held when each decoded token's query runs, averaged over the `decode` queries.
    Position-based and storage operations: exact, from `cache.cache_bytes` at every length.
    A press: what it held after the prefill (measured) plus each decoded token on every layer, a
    sliding-window layer only until its window is full (after that an entry enters as an older one
    leaves, and the count is kept constant: an undercount of at most one entry per decoded token
    and such layer where the press had already dropped the leaving entry).
    A decode-time policy: its budget, constant. A transformers cache object: its measured bytes per
    prefill token times the tokens held."""
    if not op.data_dependent:
        return sum(cache_bytes(config, op, prefill + t, dtype) for t in range(decode)) / decode
    if isinstance(op, DecodePolicy):
        return held_after_prefill
    if not isinstance(op, Press):  # a cache object: bytes grow with the tokens stored
        return held_after_prefill * (prefill + (decode - 1) / 2) / prefill
    kv_heads, head_dim = kv_shape(config)
    per_entry = 2 * kv_heads * head_dim * dtype.itemsize
    kinds = layer_types(config)
    window = getattr(config, "sliding_window", None) or 0
    grown = 0
    for t in range(decode):
        for kind in kinds:
            grown += t if kind != "sliding_attention" else max(0, min(t, window - 1 - prefill))
    return held_after_prefill + per_entry * grown / decode


def _stand_in(prefill: int, layer: int, n_layers: int) -> SimpleNamespace:
    """What a press's `budget` reads of a layer: the prefill length and the layer's index."""
    return SimpleNamespace(keys=torch.empty(1, 1, prefill, 0), layer=layer, n_layers=n_layers)


def construction_ties(config, ops: list[CacheOp], prefill: int) -> list[dict]:
    """Pairs (a, b specs) that must score alike, with why, read off the config and the ops."""
    kv_heads, _ = kv_shape(config)
    snaps = {(op.compression_ratio, op.window, op.kernel): op for op in ops if type(op) is SnapKVPress}
    out = []
    for op in ops:
        key = (op.setting("compression_ratio"), op.setting("window"), op.setting("kernel"))
        snap = snaps.get(key)
        if isinstance(op, AdaKVPress) and snap is not None and kv_heads == 1:
            out.append({"a": op.spec, "b": snap.spec,
                        "why": "the model has one KV head per layer, so AdaKV has no "
                        "other head to move budget to: it keeps what SnapKV keeps"})
        if isinstance(op, PyramidKVPress) and snap is not None:
            layers = config.num_hidden_layers
            budgets = {op.budget(_stand_in(prefill, i, layers)) for i in range(layers)}
            if budgets == {kept_per_head(prefill, op.compression_ratio)}:
                out.append({"a": op.spec, "b": snap.spec,
                            "why": f"at compression {op.compression_ratio:g} the pyramid "
                            f"does not fit a {prefill}-token prefill, so PyramidKV falls back to SnapKV's "
                            "budget on every layer (kvpress's rule)"})
        if isinstance(op, (SnapKVPress, AdaKVPress)) and kept_per_head(prefill,
                                                                       op.compression_ratio) <= op.window:
            out.append({"a": op.spec, "b": None,
                        "why": f"its budget ({kept_per_head(prefill, op.compression_ratio)} "
                        f"entries per KV head) is no larger than its observation window ({op.window}), which "
                        "it always keeps: it holds only the most recent prefill tokens, no sinks"})
    return out


def by_level(ops: list[CacheOp], prefill: int, decode: int) -> dict[float, list[str]]:
    """Press ratio -> the specs compared there (presses, and fixed budgets matched to it)."""
    ratios = sorted({op.compression_ratio for op in ops if isinstance(op, Press)})
    levels: dict[float, list[str]] = {}
    for op in ops:
        r = level(op, prefill, decode, ratios)
        if r is not None:
            levels.setdefault(r, []).append(op.spec)
    return dict(sorted(levels.items()))


def verdicts(run: dict, levels: dict[float, list[str]]) -> tuple[list[dict], dict]:
    """Every pair within each level, paired over documents (`compare.paired(...).to_dict()` with
    the level added), and per level the leader (`compare.best`) and the share of resamples that
    reverse each pair's order (`compare.resampled_flips`)."""
    pairs, per_level = [], {}
    for r, specs in levels.items():
        values = {s: run["ops"][s]["per_doc_kl"] for s in specs if s in run["ops"]}
        if len(values) < 2:
            continue
        pairs += [{**p.to_dict(), "level": r} for p in compare.pairwise(values)]
        leader, tied = compare.best(values)
        flips = compare.resampled_flips(values)
        per_level[str(r)] = {"best": leader, "leaders": tied, "flips": flips,
                             "flipping": sorted(k for k, share in flips.items() if share > FLIP_SHARE),
                             "pairs": len(values) * (len(values) - 1) // 2}
    return pairs, per_level


def analyse(run: dict, config, ops: list[CacheOp]) -> dict:
    """Add to an accept_many run of the frontier: per op `per_doc_kl`, `mean_held_bytes` and
    `level`; the run's `verdicts`, `levels` (leader, flips), `construction_ties` and `kv_heads`."""
    prefill, decode = run["prefill"], run["decode"]
    dtype = getattr(torch, run["dtype"])
    levels = by_level([op for op in ops if op.spec in run["ops"]], prefill, decode)
    where = {s: r for r, specs in levels.items() for s in specs}
    for op in ops:
        r = run["ops"].get(op.spec)
        if r is None:
            continue
        r["per_doc_kl"] = [d["mean_kl"] for d in r["per_document"]]
        r["mean_held_bytes"] = mean_held_bytes(config, op, r["cache_bytes"], prefill, decode, dtype)
        r["level"] = where.get(op.spec)
    run["exact_mean_held_bytes"] = mean_held_bytes(config, parse_op("exact"), run["exact_cache_bytes"],
                                                   prefill, decode, dtype)
    run["verdicts"], run["levels"] = verdicts(run, levels)
    run["construction_ties"] = [t for t in construction_ties(config, ops, prefill)
                                if t["a"] in run["ops"] and (t["b"] is None or t["b"] in run["ops"])]
    run["kv_heads"] = kv_shape(config)[0]
    run["sliding"] = sliding_note(config, prefill)
    return run


def sliding_note(config, prefill: int) -> dict | None:
    """Where the model has sliding-window layers and the prefill fills their window: how many of its
    layers only ever see the last `window` positions (a press's choice among older entries there
    changes nothing, and what it holds depends on how many kept entries fall inside the window)."""
    kinds = layer_types(config)
    window = getattr(config, "sliding_window", None)
    sliding = sum(k == "sliding_attention" for k in kinds)
    if not sliding or window is None or prefill < window:
        return None
    return {"layers": sliding, "of": len(kinds), "window": window}
