"""The step path for an operation that decides from positions alone (a window, a quantiser, a
chunk): one document, one token per forward, the cache held literally as the operation keeps it,
the new entry appended, then evicted, stored or re-rotated as the operation says.
"""
from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer

from kvutils.cache.forward import attention_masks, forward_logits
from kvutils.cache.prefilled import prefill_for
from kvutils.models.loading import Loaded
from kvutils.models.rotary import rotate_keys


def _held_layer(keys: torch.Tensor, values: torch.Tensor) -> DynamicLayer:
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


class _Held:
    """One layer's cache as the operation keeps it: entries in slot (document position) order."""

    def __init__(self, keys, values, slots):
        self.keys, self.values, self.slots = keys.clone(), values.clone(), slots  # written in place below
        self.coords = slots.clone()  # the rotary position each key carries
        self.stored = torch.zeros(len(slots), dtype=torch.bool)  # the key in stored form
        self.stored_v = torch.zeros(len(slots), dtype=torch.bool)  # the value in stored form

    def extend(self, keys, values, slot: int, coord: int):
        """Take the layer's keys/values after the forward: the held ones plus the new entry."""
        self.keys, self.values = keys, values
        self.slots = torch.cat([self.slots, torch.tensor([slot])])
        self.coords = torch.cat([self.coords, torch.tensor([coord])])
        self.stored = torch.cat([self.stored, torch.tensor([False])])
        self.stored_v = torch.cat([self.stored_v, torch.tensor([False])])

    def settle(self, loaded: Loaded, layer_idx: int, op, next_query: int):
        """Apply the operation before the query at `next_query`: evict, re-index, store."""
        keep = op.keeps(self.slots, torch.tensor([next_query]))[0]
        if not keep.all():
            self.keys, self.values = self.keys[..., keep, :], self.values[..., keep, :]
            self.slots, self.coords = self.slots[keep], self.coords[keep]
            self.stored, self.stored_v = self.stored[keep], self.stored_v[keep]
        if op.reindexes_positions:
            target = torch.arange(len(self.slots))
            if not torch.equal(target, self.coords):
                self.keys = rotate_keys(loaded, layer_idx, self.keys, target - self.coords)
                self.coords = target
        if op.transforms_storage:
            due = (~self.stored & (op.stored_after(self.slots) < next_query)).nonzero().squeeze(1)
            if len(due):
                self.keys[..., due, :] = op.store_keys(self.keys[..., due, :], self.slots[due])
                self.stored[due] = True
            due = (~self.stored_v & (op.values_stored_after(self.slots) < next_query)).nonzero().squeeze(1)
            if len(due):
                self.values[..., due, :] = op.store_values(self.values[..., due, :], self.slots[due])
                self.stored_v[due] = True


def score_held_step(loaded: Loaded, op, ids: torch.Tensor, prefill: int, decode: int,
                    exact_kv) -> torch.Tensor:
    """`score_step` for an operation that decides from positions alone (a window, a quantiser, a
    chunk): one document, the cache held literally as the operation keeps it."""
    kv = prefill_for(loaded, op, ids, prefill, exact_kv).kv
    states = [_Held(k, v, torch.arange(prefill)) for k, v in kv]
    for i, state in enumerate(states):
        state.settle(loaded, i, op, prefill)
    logits = []
    for n in range(prefill, prefill + decode):
        layers = [_held_layer(s.keys, s.values) for s in states]
        held = len(states[0].slots)
        coord = held if op.reindexes_positions else n
        key_slots = torch.cat([states[0].slots, torch.tensor([n])])
        masks = attention_masks(loaded, torch.ones(1, held + 1, dtype=torch.bool), torch.tensor([n]),
                                key_slots)
        logits.append(forward_logits(loaded, ids[None, n:n + 1], torch.tensor([coord]), masks, layers)[-1])
        for i, (state, layer) in enumerate(zip(states, layers)):
            state.extend(layer.keys, layer.values, n, coord)
            state.settle(loaded, i, op, n + 1)
    return torch.stack(logits)
