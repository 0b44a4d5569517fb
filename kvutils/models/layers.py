"""What a model's config says about its decoder layers: each one's attention type and window, and
the shape of the keys and values each caches."""
from __future__ import annotations


def layer_types(config) -> list[str]:
    """Per layer, "full_attention" or "sliding_attention" (or whatever the config names); a config
    without `layer_types` has full attention in every layer."""
    return getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers


def layer_windows(config) -> list[int | None]:
    """Per layer, the attention window (None: the layer attends to every earlier token)."""
    window = getattr(config, "sliding_window", None)
    return [window if t == "sliding_attention" and window else None for t in layer_types(config)]


def kv_shape(config) -> tuple[int, int]:
    """(kv_heads, head_dim) of a model config."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return kv_heads, head_dim
