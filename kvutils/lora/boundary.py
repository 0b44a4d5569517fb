"""Running a model from a stored layer boundary: the base model's hidden states entering layer
L−k, kept from one pass, and the tail's layers run from them (forward and backward) while the
layers below pass their input through; the caches those passes fill."""
from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers import DynamicCache

from kvutils.core import cores
from kvutils.lora.families import decoder, decoder_layers, unwrap
from kvutils.lora.tails import active_adapter


@contextmanager
def skip_lower_layers(model: torch.nn.Module, n: int) -> Iterator:
    """Inside the block, decoder layers 0 … n−1 pass their input through unchanged (and touch no
    cache), so a forward given `inputs_embeds` = the hidden states at layer n runs only layers n … L−1.
    Rotary embeddings and masks are still built by the model from the positions, as in a full pass."""
    layers = decoder_layers(model)
    skipped = []
    try:
        for layer in layers[:n]:
            layer.forward = _identity
            skipped.append(layer)
        yield model
    finally:
        for layer in skipped:
            del layer.forward  # back to the class's forward


def _identity(hidden_states, *args, **kwargs):
    return hidden_states


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Position ids for a left-padded batch: 0 at each row's first real token. (batch, seq)"""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def boundary_states(model, ids: torch.Tensor, mask: torch.Tensor, layers: Sequence[int],
                    cache=None) -> dict[int, torch.Tensor]:
    """The base model's hidden states entering each of `layers` (0 = the embeddings), for a
    left-padded batch: {layer: (batch, seq, hidden)}. Adapters are off; no gradients. A `cache`
    given (see `new_cache`) is filled with every layer's K/V in the same pass."""
    with torch.no_grad(), active_adapter(model, None):
        out = decoder(model)(input_ids=ids, attention_mask=mask, position_ids=positions_of(mask),
                             output_hidden_states=True, cache=cache, use_cache=cache is not None)
    return {layer: out.hidden_states[layer] for layer in layers}


BOUNDARY_ROWS = 128  # rows per base pass: a pass keeps every layer's hidden states of its rows at once


def states_and_prefix_cache(model, ids: torch.Tensor, mask: torch.Tensor, layers: Sequence[int],
                            marker_len: int, rows: int = BOUNDARY_ROWS) -> tuple[dict[int, torch.Tensor],
                                                                                 object]:
    """One base pass over a left-padded batch whose rows all end with the marker, `rows` rows at a
    time (a pass holds all L + 1 hidden states of its rows: for a training set of thousands of
    examples, gigabytes at once): the hidden states entering `layers` (see `boundary_states`) and
    the cache of everything before the marker, each joined along the batch."""
    states, caches = [], []
    for start in range(0, ids.shape[0], rows):
        cores.share()  # in make book, the cores other jobs have freed
        cache = new_cache(model)
        states.append(boundary_states(model, ids[start:start + rows], mask[start:start + rows], layers,
                                      cache=cache))
        cache.crop(-marker_len)
        caches.append(cache)
    joined = caches[0]
    for i, layer in enumerate(joined.layers):  # (batch, kv_heads, seq, head_dim), the chunks' rows in order
        if layer.is_initialized and len(caches) > 1:
            layer.keys = torch.cat([c.layers[i].keys for c in caches])
            layer.values = torch.cat([c.layers[i].values for c in caches])
    return {layer: torch.cat([s[layer] for s in states]) for layer in layers}, joined


def select_rows(cache, rows: Sequence[int] | torch.Tensor):
    """A cache of some rows of `cache`'s batch; `cache` itself is left as it is."""
    out = copy_cache(cache)
    index = torch.as_tensor(rows, dtype=torch.long)
    for layer in out.layers:
        if layer.is_initialized:
            layer.batch_select_indices(index.to(layer.keys.device))
    return out


def marker_logits(model, boundary: torch.Tensor, mask: torch.Tensor, start: int, marker_len: int,
                  prefix_cache) -> torch.Tensor:
    """An activated adapter's last-position logits (batch, vocab), running only the marker's tokens
    through layers start … L−1 on `prefix_cache` (the base model's K/V of everything before the
    marker; it grows by the marker). The same numbers as `tail_logits` over the whole sequence with
    `alora_offsets`: the activated adapter leaves the prefix to the base weights, so the prefix's
    K/V in the tail are the base model's, and causal attention lets no gradient reach them. The
    prefix's tokens drop out of every training step (a few tokens of marker instead of the whole
    sequence)."""
    positions = positions_of(mask)[:, -marker_len:]
    with skip_lower_layers(model, start), efficient_head(model):
        out = model(inputs_embeds=boundary[:, -marker_len:], attention_mask=mask, position_ids=positions,
                    cache=prefix_cache, use_cache=True, logits_to_keep=1,
                    alora_offsets=[marker_len] * boundary.shape[0])
    return out.logits[:, -1]


@contextmanager
def efficient_head(model: torch.nn.Module) -> Iterator:
    """Inside the block the output head gets a contiguous input, and under autocast it multiplies
    by a low-precision copy of its weight made once (and kept on the head) rather than at every call.

    With `logits_to_keep=1` a batch's last hidden states are a strided view, and a linear layer on
    a strided 3-D input runs as a batched matmul against the weight expanded per row: on CPU that
    took more than half of a training step of a one-layer tail (and far more with Gemma 3's
    262k-token head). Autocast casts a frozen weight anew at every call: for Gemma 3's head, 168M
    numbers per step to multiply 16 rows."""
    head = unwrap(model).get_output_embeddings()
    plain = head.forward

    def forward(hidden, *args, **kwargs):
        kind = hidden.device.type
        if head.bias is not None or not torch.is_autocast_enabled(kind):
            return plain(hidden.contiguous(), *args, **kwargs)
        dtype = torch.get_autocast_dtype(kind)
        key = (dtype, head.weight.data_ptr(), head.weight._version)
        if getattr(head, "_kvutils_cast", (None,))[0] != key:
            head._kvutils_cast = (key, head.weight.detach().to(dtype))
        return torch.nn.functional.linear(hidden.contiguous().to(dtype), head._kvutils_cast[1])
    head.forward = forward
    try:
        yield model
    finally:
        del head.forward  # back to the class's forward


def tail_logits(model, boundary: torch.Tensor, mask: torch.Tensor, start: int,
                alora_offsets: list[int] | None = None) -> torch.Tensor:
    """Last-position logits (batch, vocab) of a left-padded batch, computed from the hidden states
    at layer `start`: only layers start … L−1 run (forward and backward)."""
    extra = {"alora_offsets": alora_offsets} if alora_offsets is not None else {}
    with skip_lower_layers(model, start), efficient_head(model):
        out = model(inputs_embeds=boundary, attention_mask=mask, position_ids=positions_of(mask),
                    use_cache=False, logits_to_keep=1, **extra)
    return out.logits[:, -1]


def copy_cache(cache):
    """A cache sharing the same K/V tensors whose layers can grow independently (appending
    rebinds a layer's tensors, so the original never sees the new tokens)."""
    out = copy.copy(cache)
    out.layers = [copy.copy(layer) for layer in cache.layers]
    return out


def new_cache(model):
    return DynamicCache(config=unwrap(model).config)


def cache_layers(cache) -> list:
    """A cache's K/V as plain tensors, [keys, values] per layer (None where a layer holds nothing):
    what a checkpoint stores (`cache_from_layers` makes the cache again)."""
    return [[layer.keys, layer.values] if layer.is_initialized else None for layer in cache.layers]


def cache_from_layers(model, layers: list):
    """The cache `cache_layers` was given: each layer's K/V appended to an empty cache of the model."""
    cache = new_cache(model)
    for i, kv in enumerate(layers):
        if kv is not None:
            cache.update(kv[0], kv[1], i)
    return cache
