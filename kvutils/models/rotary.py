"""Moving cached keys to other positions with the model's own rotary functions.

A cached key already carries the rotation of the position it was computed at. Rotary position
embeddings rotate each pair of channels by an angle proportional to the position, so rotating a
cached key by `delta` more positions gives exactly the key computed at `position + delta` (rotations
of one plane compose by adding angles). This is what re-indexing a window (StreamingLLM) or a
reused chunk needs. Qwen3 and Gemma 3 normalise keys *before* the rotation, so the same holds for
them. The one family difference — GPT-NeoX rotates only the first `rotary_pct` of each head's
channels — is handled here, once: only the first `cos.shape[-1]` channels are rotated, whatever
the family.
"""
from __future__ import annotations

import inspect
import sys

import torch

from kvutils.models.layers import layer_types
from kvutils.models.loading import Loaded


def rotary_module(model: torch.nn.Module) -> torch.nn.Module:
    """The model's rotary embedding module (the one that turns positions into cos/sin)."""
    for module in model.modules():
        if type(module).__name__.endswith("RotaryEmbedding"):
            return module
    raise ValueError(f"{type(model).__name__} has no rotary embedding; its keys cannot be re-indexed")


def layer_type(loaded: Loaded, layer_idx: int) -> str:
    """"full_attention" or "sliding_attention" (or whatever the config names) for one layer."""
    return layer_types(loaded.config)[layer_idx]


def rotary_cos_sin(loaded: Loaded, layer_idx: int, like: torch.Tensor,
                   positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of `positions` (seq,) for one layer, as the model computes them, divided by the
    rotary `attention_scaling` (YaRN-style scaling multiplies cos/sin; a pure rotation must not).
    Shapes (1, seq, rotary_dim)."""
    rotary = rotary_module(loaded.model)
    kind = layer_type(loaded, layer_idx)
    position_ids = positions.to(like.device).view(1, -1)
    if "layer_type" in inspect.signature(rotary.forward).parameters:  # Gemma 3: local/global rope
        cos, sin = rotary(like, position_ids, kind)
        scaling = getattr(rotary, f"{kind}_attention_scaling", 1.0)
    else:
        cos, sin = rotary(like, position_ids)
        scaling = getattr(rotary, "attention_scaling", 1.0)
    return cos / scaling, sin / scaling


def rotate_keys(loaded: Loaded, layer_idx: int, keys: torch.Tensor,
                delta: int | torch.Tensor) -> torch.Tensor:
    """Rotate cached `keys` (batch, kv_heads, seq, head_dim) by `delta` positions: an int for all,
    or a (seq,) tensor, one shift per key. Uses the modeling module's own `apply_rotary_pos_emb`."""
    seq = keys.shape[-2]
    if not isinstance(delta, torch.Tensor):
        delta = torch.full((seq,), int(delta), dtype=torch.long)
    if delta.shape != (seq,):
        raise ValueError(f"delta must be an int or a tensor of shape ({seq},), got {tuple(delta.shape)}")
    cos, sin = rotary_cos_sin(loaded, layer_idx, keys, delta)
    rotary_dim = cos.shape[-1]
    apply = sys.modules[type(rotary_module(loaded.model)).__module__].apply_rotary_pos_emb
    k_rot, k_pass = keys[..., :rotary_dim], keys[..., rotary_dim:]
    _, rotated = apply(k_rot, k_rot, cos, sin)
    return torch.cat([rotated, k_pass], dim=-1)
