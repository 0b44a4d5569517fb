"""Cache patching: overwrite cached K/V at chosen positions × layers (from another run, or with
anything a setter computes), run the model on, and measure what changes.

The shape follows TransformerLens' activation patching: one generic function (`patch_cache`)
that visits the chosen slices of a transformers `Cache`, and small *setters* that say what each
slice becomes (`copy_source`, `zero`). `patched(...)` is the context-manager form: the cache is
restored in `finally`, so a failed forward inside the block never leaves a patched cache behind.
`patch_grid` evaluates many single patches at once, one per batch row of an expanded cache, beside
an unpatched row of the same batch; `answer_map` builds chapter 5's positions × layers map on it.

Positions are absolute token positions. A sliding-window layer may hold only its most recent
entries; patching a position it no longer holds is an error, not a silent no-op.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from tqdm import tqdm

from kvutils.core import cores
from kvutils.lora.boundary import copy_cache, efficient_head, new_cache, skip_lower_layers
from kvutils.lora.families import decoder
from kvutils.lora.switching import layer_differences, nan_max
from kvutils.lora.tails import active_adapter

PARTS = ("keys", "values")

# A setter gets the current slice and the source's slice (None without a source), both
# (rows, kv_heads, positions, head_dim), and returns the new slice.
Setter = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def copy_source(current: torch.Tensor, source: torch.Tensor | None) -> torch.Tensor:
    """The source run's entries (activation patching)."""
    if source is None:
        raise ValueError("copy_source needs a source cache")
    return source.expand_as(current)


def zero(current: torch.Tensor, source: torch.Tensor | None) -> torch.Tensor:
    """Zeros (ablation)."""
    return torch.zeros_like(current)


@dataclass(frozen=True)
class Patch:
    """Which slices to overwrite: absolute positions × layers, optionally only some batch rows."""

    layers: tuple[int, ...]
    positions: tuple[int, ...]
    rows: tuple[int, ...] | None = None  # batch rows of the target (None: every row)
    parts: tuple[str, ...] = PARTS

    def __post_init__(self):
        if not self.layers or not self.positions:
            raise ValueError("a Patch needs at least one layer and one position")
        bad = [p for p in self.parts if p not in PARTS]
        if bad or not self.parts:
            raise ValueError(f"Patch.parts: {bad or 'nothing'} not allowed; choose from {PARTS}")


def _slots(layer, seq_len: int, positions: Sequence[int], layer_idx: int) -> torch.Tensor:
    """Indices into a layer's held entries for absolute positions (sliding layers hold the last ones)."""
    held = layer.keys.shape[-2]
    first = seq_len - held
    slots = [p - first for p in positions]
    if any(s < 0 or s >= held for s in slots):
        raise ValueError(f"layer {layer_idx} holds positions {first}..{seq_len - 1}; cannot patch "
                         f"{list(positions)}")
    return torch.tensor(slots, device=layer.keys.device)


def _source_slice(source, layer_idx: int, part: str, positions: Sequence[int], rows) -> torch.Tensor:
    layer = source.layers[layer_idx]
    seq_len = source.get_seq_length()
    tensor = getattr(layer, part)[:, :, _slots(layer, seq_len, positions, layer_idx)]
    if rows is not None and tensor.shape[0] > 1:
        tensor = tensor[list(rows)]
    return tensor


def patch_cache(cache, patches: Sequence[Patch], source=None, setter: Setter = copy_source,
                saved: list | None = None) -> list:
    """Apply `patches` to `cache` in place and return what undoes them (see `restore`).

    For every patch, layer and part, the slice [rows, :, positions, :] becomes
    setter(current slice, source slice). The source is a cache of the same model whose batch is 1 or
    the target's; its entries are read at the same absolute positions. Every slice is saved before
    it is written, into `saved` if given, so a failure half-way can still be undone.
    """
    saved = [] if saved is None else saved
    seq_len = cache.get_seq_length()
    for patch in patches:
        for layer_idx in patch.layers:
            layer = cache.layers[layer_idx]
            slots = _slots(layer, seq_len, patch.positions, layer_idx)
            rows = torch.arange(layer.keys.shape[0]) if patch.rows is None else torch.tensor(patch.rows)
            index = (rows[:, None], slice(None), slots[None, :])  # (rows, heads, positions, dim)
            for part in patch.parts:
                tensor = getattr(layer, part)  # (batch, kv_heads, seq, head_dim)
                current = tensor[:, :, slots][rows]
                src = None if source is None else _source_slice(source, layer_idx, part, patch.positions,
                                                                patch.rows)
                new = setter(current, src)
                saved.append((tensor, index, current.clone()))
                tensor[index] = _assign(tensor, new)
    return saved


def _assign(tensor: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """`new` (rows, kv_heads, positions, head_dim) as the value of `tensor[rows[:, None], :,
    slots[None, :]] = ...`: the advanced indices on dims 0 and 2 come first in that view, which is
    (rows, positions, kv_heads, head_dim)."""
    return new.permute(0, 2, 1, 3).to(tensor.dtype)


def restore(saved: list) -> None:
    """Undo `patch_cache`, newest write first."""
    for tensor, index, original in reversed(saved):
        tensor[index] = _assign(tensor, original)
    saved.clear()


@contextmanager
def patched(cache, patches: Sequence[Patch], source=None, setter: Setter = copy_source) -> Iterator:
    """`with patched(cache, [Patch(layers=(3,), positions=(5,))], source):` — inside the block the
    cache holds the patched entries; afterwards (even after an exception) the original ones.
    Forwards inside the block must not append to the cache (pass a copy; see `expand`)."""
    saved: list = []
    try:
        patch_cache(cache, patches, source, setter, saved)
        yield cache
    finally:
        restore(saved)


def expand(cache, batch: int):
    """A new cache of the same layers with every entry repeated `batch` times along the batch
    axis (fresh tensors, so patching or appending to it leaves `cache` untouched)."""
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        twin = copy.copy(layer)
        twin.keys = layer.keys.repeat(batch, 1, 1, 1)  # (batch, kv_heads, held, head_dim)
        twin.values = layer.values.repeat(batch, 1, 1, 1)
        out.layers.append(twin)
    return out


def patch_grid(cache, source, cells: Sequence[Patch], evaluate: Callable[[object, int], torch.Tensor],
               chunk: int = 64, setter: Setter = copy_source) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluate each single patch of `cells` (their `rows` ignored) on its own batch row.

    `cache` and `source` have batch 1. For each chunk of cells the cache is expanded to 1 + one row
    per cell; row 0 stays unpatched and cell i is written into row i + 1 only; `evaluate(cache,
    rows)` returns one result per row (e.g. the answer's logits after the next tokens) and may
    append to that temporary cache. Returns (patched results in cell order, the unpatched row of
    each cell's own batch): compare within a batch, because a forward's rounding can depend on the
    batch size, and an unchanged entry must give exactly the unpatched answer.
    """
    results, baselines = [], []
    for start in range(0, len(cells), chunk):
        part = cells[start:start + chunk]
        grid = expand(cache, len(part) + 1)
        patches = [Patch(c.layers, c.positions, (i + 1,), c.parts) for i, c in enumerate(part)]
        with patched(grid, patches, source, setter):
            out = evaluate(grid, len(part) + 1)
        results.append(out[1:])
        baselines.append(out[:1].expand(len(part), *out.shape[1:]))
    return torch.cat(results), torch.cat(baselines)


# --------------------------------------------------------------------------- a map of answer changes


def runs(items, n: int) -> list[list]:
    """`n` contiguous runs of `items`, as even as possible (none empty if len(items) >= n)."""
    items = list(items)
    bounds = [round(i * len(items) / n) for i in range(n + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


@torch.no_grad()
def answer_map(model, adapter: str, pairs: Sequence[tuple[list[int], list[int], int, int]],
               marker_ids: Sequence[int], prefix_len: int, cols: Sequence[tuple[int, ...]], control_bins: int,
               bins: int, device: str = "cpu", chunk: int = 64,
               foreign: Sequence[Sequence[int] | None] | None = None) -> dict:
    """Where an adapter reads its answer from: for each pair (target ids, source ids, target's
    answer token, the other answer token), the adapter's own cache of the target, patched from the
    source's, cell by cell; the adapter then reads the marker.

    Each context's cache comes from its own forward pass over the whole context. Rows: the first
    `prefix_len` tokens, which both contexts share, in `control_bins` runs (the control: a causal
    model computes their entries before it reads what differs, so the two caches hold the same bits
    there — `prefix_kv_max_diff` measures it, it is not assumed — and copying them must change
    nothing); `bins` contiguous runs of the rest (copied from the same absolute positions, up to
    the shorter context's end); all of the rest. Columns: `cols` (tuples of layers).

    `foreign` (one entry per pair, or None): the ids of a context that does NOT share the target's
    prefix; its entries are copied into the same prefix cells. That control can fail: its bits
    differ, so a map that shows nothing there is blind, not a confirmation of the theorem.

    Returns the answer's log-odds (own token − other) per pair and cell, patched and unpatched (the
    unpatched row of the same batch), and the clean run's, so every summary can be recomputed
    (`summarise_map`), with the summaries themselves.
    A patch in layers >= s cannot change the marker's states below layer s, so each column runs the
    marker from its first patched layer, starting from the clean run's hidden states there.
    """
    m = len(marker_ids)
    marker = torch.tensor([list(marker_ids)], device=device)  # (1, m)
    controls = runs(range(prefix_len), min(prefix_len, control_bins))
    prefix_gap = 0.0
    per_pair: dict[str, list] = {"clean": [], "patched": [], "unpatched": [], "foreign_patched": [],
                                 "foreign_unpatched": []}
    foreign = list(foreign) if foreign is not None else [None] * len(pairs)
    for (target_ids, source_ids, own, other), alien in tqdm(list(zip(pairs, foreign)), desc="patching",
                                                            unit="context"):
        cores.share()
        if list(target_ids[:prefix_len]) != list(source_ids[:prefix_len]):
            raise ValueError("the two contexts do not share their first prefix_len tokens")
        caches = [own_cache(model, adapter, ids, device) for ids in (target_ids, source_ids)]
        length, n = len(target_ids), min(len(target_ids), len(source_ids))
        prefix_gap = nan_max([prefix_gap, *layer_differences(caches[0], caches[1], prefix_len)])
        with active_adapter(model, adapter):
            clean = model(input_ids=marker, cache=copy_cache(caches[0]), use_cache=True,
                          output_hidden_states=True)
        per_pair["clean"].append((clean.logits[0, -1, own] - clean.logits[0, -1, other]).item())
        marker_positions = torch.arange(length, length + m, device=device)[None]  # (1, m)
        spans = [tuple(c) for c in controls] + [tuple(r) for r in runs(range(prefix_len, n), bins)]
        spans.append(tuple(range(prefix_len, n)))
        alien_cache = None if alien is None else own_cache(model, adapter, alien, device)
        grids = _pair_grids(model, adapter, caches, alien_cache, clean.hidden_states, marker_positions,
                            (own, other),
                            spans, controls, cols, chunk)
        for key, by_col in grids.items():  # [col][row] -> [row][col]
            per_pair[key].append([list(row) for row in zip(*by_col)] if by_col else None)
    n_rows = len(controls) + bins + 1
    return {**summarise_map(per_pair, n_rows, len(cols), len(controls)), "per_pair": per_pair,
            "control_rows": len(controls), "prefix_kv_max_diff": prefix_gap, "n_contexts": len(pairs)}


def _pair_grids(model, adapter: str, caches: list, alien_cache, hidden_states, marker_positions,
                answers: tuple[int, int],
                spans: list, controls: list, cols: Sequence[tuple[int, ...]], chunk: int) -> dict[str, list]:
    """One pair's log-odds per column (a group of layers) and row (a span), patched from the source
    and unpatched, and the foreign control's where there is one: {key: [col][row]}."""
    own, other = answers
    grids = {key: [] for key in ("patched", "unpatched", "foreign_patched", "foreign_unpatched")}
    for layers in cols:
        start = layers[0]
        states = hidden_states[start]  # (1, m, hidden) entering the first patched layer

        def answer(cache, rows, start=start, states=states):
            with active_adapter(model, adapter), skip_lower_layers(model, start), efficient_head(model):
                out = model(inputs_embeds=states.expand(rows, -1, -1), cache=cache, use_cache=True,
                            position_ids=marker_positions.expand(rows, -1), logits_to_keep=1)
            logits = out.logits[:, -1]
            return logits[:, own] - logits[:, other]  # (rows,) the answer's log-odds

        after, before = patch_grid(caches[0], caches[1], [Patch(layers, span) for span in spans], answer,
                                   chunk)
        grids["patched"].append(after.tolist())
        grids["unpatched"].append(before.tolist())
        if alien_cache is not None:
            after, before = patch_grid(caches[0], alien_cache, [Patch(layers, tuple(c)) for c in controls],
                                       answer, chunk)
            grids["foreign_patched"].append(after.tolist())
            grids["foreign_unpatched"].append(before.tolist())
    return grids


def _flipped(x: float, y: float) -> bool:
    return (x > 0) != (y > 0)


def summarise_map(per_pair: dict, n_rows: int, n_cols: int, control_rows: int) -> dict:
    """The map's summaries from its per-pair log-odds (see `answer_map`). A flip is counted only
    where the clean adapter answers right (n per cell: those pairs), so a flip always means a right
    answer turned wrong; the mean change of the log-odds is over every pair."""
    right = [c > 0 for c in per_pair["clean"]]
    flips = [[0] * n_cols for _ in range(n_rows)]
    delta = [[0.0] * n_cols for _ in range(n_rows)]
    count = [[0] * n_cols for _ in range(n_rows)]
    control = 0.0
    for ok, after, before in zip(right, per_pair["patched"], per_pair["unpatched"]):
        for row in range(min(n_rows, len(after))):
            for col in range(n_cols):
                x, y = after[row][col], before[row][col]
                delta[row][col] += x - y
                if row < control_rows:
                    control = max(control, abs(x - y)) if x == x and y == y else float("nan")
                if ok:
                    flips[row][col] += _flipped(x, y)
                    count[row][col] += 1
    pairs = len(right)
    nan = float("nan")
    return {"flip_pct": [[100 * f / c if c else nan for f, c in zip(fr, cr)] for fr, cr in zip(flips, count)],
            "flips": flips, "count": count,
            "delta_logodds_mean": [[d / pairs if pairs else nan for d in row] for row in delta],
            "control_max_abs_delta": control, "n_clean_right": sum(right),
            "clean_accuracy_pct": 100 * sum(right) / pairs if pairs else nan,
            "foreign_control": foreign_summary(per_pair, right, control_rows, n_cols)}


def foreign_summary(per_pair: dict, right: list[bool], control_rows: int, n_cols: int) -> dict | None:
    """The prefix cells patched from a context of another prefix: per pair, the largest |change of
    log-odds| over those cells, and whether any cell flipped a right answer."""
    rows = [(ok, a, b) for ok, a, b in zip(right, per_pair["foreign_patched"], per_pair["foreign_unpatched"])
            if a is not None]
    if not rows:
        return None
    moved = [max(abs(a[r][c] - b[r][c]) for r in range(control_rows) for c in range(n_cols)) for _, a,
             b in rows]
    flipped = [any(_flipped(a[r][c], b[r][c]) for r in range(control_rows) for c in range(n_cols))
               for ok, a, b in rows if ok]
    return {"max_abs_delta_per_pair": moved, "n_pairs": len(rows), "flipped_any": sum(flipped),
            "n_clean_right": len(flipped)}


def own_cache(model, adapter: str, ids: Sequence[int], device: str):
    """The adapter's cache of one context, from one forward pass over all of it."""
    cache = new_cache(model)
    with active_adapter(model, adapter):
        decoder(model)(input_ids=torch.tensor([list(ids)], device=device), cache=cache, use_cache=True)
    return cache
