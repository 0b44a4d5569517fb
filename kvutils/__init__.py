"""kvutils: the helper package behind "How the KV cache works".

Public API (stable; readers and every chapter call these):
    load(name, dtype=torch.float32) -> Loaded   (.model, .tokenizer, .name, .family)
    greedy(loaded, input_ids, new_tokens, use_cache) -> (token_ids, step_logits)
"""
from .engines import cache_layers, greedy, prefill
from .models import Loaded, ModelNotAvailable, load

__all__ = ["Loaded", "ModelNotAvailable", "cache_layers", "greedy", "load", "prefill"]
__version__ = "0.1.0"
