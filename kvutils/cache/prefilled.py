"""The prefill: computing a document's cache (exact, with what each layer saw, or CacheBlend's
partial recompute) and what it leaves behind: its cache, what each layer saw (LayerView), and the
hidden states at the layer boundaries where an adapter's tail starts."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicCache

from kvutils.cache.forward import ComputedLayer, attention_masks, forward_logits
from kvutils.models import attention
from kvutils.models.loading import Loaded
from kvutils.models.rotary import rotary_cos_sin

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (1, kv_heads, seq, head_dim)


@dataclass
class LayerView:
    """One layer's prefill as a data-dependent method sees it (kvpress's `score` arguments).
    keys/values (1, kv_heads, P, head_dim); queries (1, heads, P, head_dim) after the rotary
    embedding; `weights(last)` the prefill's attention weights (1, heads, last or P, P) of its last
    `last` queries (all by default) under the model's own mask, from `attention(rows)`, the weights
    of the query rows `rows` (document positions) over every key the prefill computed;
    `rotary(positions)` the layer's (cos, sin), (1, n, rotary_dim); `scale` its softmax scale."""

    layer: int
    n_layers: int
    keys: torch.Tensor
    values: torch.Tensor
    queries: torch.Tensor
    scale: float
    attention: Callable[[slice], torch.Tensor]
    rotary: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]

    def weights(self, last: int | None = None) -> torch.Tensor:
        P = self.keys.shape[-2]
        return self.attention(slice(P - (last or P), P))[..., :P]

    @property
    def groups(self) -> int:
        return self.queries.shape[1] // self.keys.shape[1]

    def per_kv_head(self, scores: torch.Tensor) -> torch.Tensor:
        """(heads, n) -> (kv_heads, n): the mean over each KV head's query group (kvpress's choice,
        SnapKV issue 22)."""
        return scores.view(self.keys.shape[1], self.groups, -1).mean(1)


@dataclass
class Prefilled:
    """What a prefill leaves behind, for the steps that continue from it: the one type for the cache
    operations (kvutils.cache.scoring) and for an adapter switch (kvutils.lora).

    kv: the cache, a KV list (the operations) or a transformers Cache (an adapter switch);
    views: what each layer saw, for the data-dependent methods;
    boundary: layer -> the hidden states entering it, (1, prefix, hidden), for an adapter's tail;
    length: the tokens prefilled."""

    kv: KV | Cache
    views: list[LayerView] | None = None
    boundary: dict[int, torch.Tensor] | None = None
    length: int | None = None


@torch.inference_mode()
def kv_forward(loaded: Loaded, ids: torch.Tensor, positions: torch.Tensor | None = None) -> KV:
    """Every layer's K/V for `ids` (1, seq) run with no past, at `positions` (default 0..seq-1).
    Sliding layers keep every entry too (their window is applied by the masks), so all layers are
    indexed alike by document position."""
    seq = ids.shape[-1]
    positions = torch.arange(seq) if positions is None else positions
    slots = torch.arange(seq)
    masks = attention_masks(loaded, slots[None, :] <= slots[:, None], slots, slots)
    cache = DynamicCache()
    loaded.model(input_ids=ids.to(loaded.device), position_ids=positions.view(1, -1).to(loaded.device),
                 attention_mask=masks, cache=cache, use_cache=True, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in cache.layers]


@torch.inference_mode()
def recompute_selected(loaded: Loaded, ids: torch.Tensor, kv: KV, selected: torch.Tensor) -> KV:
    """CacheBlend's partial prefill: the tokens at `selected` (sorted document positions) are run
    again, reading the cache `kv` (all positions of `ids` (1, seq)) in which each layer's entries
    for those tokens are replaced by the recomputed ones before attention reads them. Returns the
    blended cache. With every position selected this is an ordinary in-context prefill."""
    slots = torch.arange(ids.shape[-1])

    def assemble_into(keys, values):
        def assemble(new_keys, new_values):
            keys_out, values_out = keys.clone(), values.clone()
            keys_out[..., selected, :], values_out[..., selected, :] = new_keys, new_values
            return keys_out, values_out
        return assemble

    layers = [ComputedLayer(assemble_into(k, v)) for k, v in kv]
    masks = attention_masks(loaded, slots[None, :] <= selected[:, None], selected, slots)
    forward_logits(loaded, ids[:, selected], selected, masks, layers, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in layers]


@torch.inference_mode()
def exact_prefill(loaded: Loaded, ids: torch.Tensor, views: bool = False) -> Prefilled:
    """`kv_forward` of `ids` (1, seq), and with `views` each layer's queries and attention too."""
    if not views:
        return Prefilled(kv_forward(loaded, ids))
    seen = {}

    def record(layer, query, key, value, weights, scale):
        seen[layer] = (query, weights, scale)

    with attention.session(loaded, record=record):
        kv = kv_forward(loaded, ids)
    out = []
    for i, (k, v) in enumerate(kv):
        query, weights, scale = seen[i]
        out.append(LayerView(i, len(kv), k, v, query, scale, weights,
                             lambda positions, i=i, like=k: rotary_cos_sin(loaded, i, like, positions)))
    return Prefilled(kv, out)


def head(pre: Prefilled, n: int) -> Prefilled:
    """The first `n` positions of a prefill: its cache, and what each layer saw, cut to them. Causal
    attention makes these what a prefill of those `n` tokens alone computes (up to the fp32
    summation-order residue chapter 1 measures), so one prefill serves every shorter one."""
    kv = [(k[..., :n, :], v[..., :n, :]) for k, v in pre.kv]
    views = None if pre.views is None else [
        dataclasses.replace(v, keys=v.keys[..., :n, :], values=v.values[..., :n, :], queries=v.queries[...,
                                                                                                       :n, :],
                            attention=v.attention)
        for v in pre.views]
    return Prefilled(kv, views, length=n)


class Remembered:
    """A view's attention weights, each set of query rows computed once and kept until `forget()`:
    for a caller that runs several methods over one prefill, layer by layer (one layer's weights
    held at a time)."""

    def __init__(self, compute: Callable[[slice], torch.Tensor]):
        self.compute, self.kept = compute, {}

    def __call__(self, rows: slice) -> torch.Tensor:
        for (start, stop), w in self.kept.items():  # rows inside ones already computed: a slice of them
            if start <= rows.start and rows.stop <= stop:
                return w[..., rows.start - start:rows.stop - start, :]
        self.kept[(rows.start, rows.stop)] = self.compute(rows)
        return self.kept[(rows.start, rows.stop)]

    def forget(self) -> None:
        self.kept.clear()


def remembered(views: list[LayerView]) -> list[LayerView]:
    """The same views, each one's weights `Remembered`."""
    return [dataclasses.replace(v, attention=Remembered(v.attention)) for v in views]


def prefill_for(loaded: Loaded, op, ids: torch.Tensor, prefill: int, exact_kv) -> Prefilled:
    """The cache the operation `op` starts from after the first `prefill` tokens of `ids` (seq,);
    `exact_kv` (a KV list or a Prefilled) is the shared exact prefill, reused where the operation
    starts from it."""
    if isinstance(exact_kv, list):
        exact_kv = Prefilled(exact_kv)
    if not op.exact_prefill:
        return Prefilled(op.prefill(loaded, ids[None, :prefill]))
    if exact_kv is not None and (exact_kv.views is not None or not op.needs_views):
        return exact_kv
    return exact_prefill(loaded, ids[None, :prefill], views=op.needs_views)
