"""kvutils: the helper package behind "How the KV cache works".

Public API (stable; readers and every chapter call these):
    load(name, dtype=torch.float32) -> Loaded   (.model, .tokenizer, .name, .family)
    greedy(loaded, input_ids, new_tokens, use_cache) -> (token_ids, step_logits)
    OPS, parse_op("window:size=128,sinks=4")    (the registered cache operations)
    kvutils.accept.accept(model, op, docs, prefill=256, decode=256) -> dict
                                                (KL, top-1, perplexity vs the exact cache; also a CLI)
"""
from .cache import OPS, parse_op
from .engines import cache_layers, greedy, prefill
from .models import Loaded, ModelNotAvailable, load

__all__ = ["OPS", "Loaded", "ModelNotAvailable", "cache_layers", "greedy", "load", "parse_op", "prefill"]
__version__ = "0.1.0"
