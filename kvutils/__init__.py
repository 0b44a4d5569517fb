"""kvutils: the helper package behind "How the KV cache works".

Public API (stable; readers and every chapter call these):
    load(name, dtype=torch.float32) -> Loaded   (.model, .tokenizer, .name, .family)
    greedy(loaded, input_ids, new_tokens, use_cache) -> (token_ids, step_logits)
    OPS, parse_op("window:size=128,sinks=4")    (the registered cache operations)
    kvutils.accept.accept(model, op, docs, prefill=256, decode=256) -> dict
                                                (KL, top-1, perplexity vs the exact cache; also a CLI)
"""
import sys as _sys

if _sys.argv[:1] == ["-m"]:  # `python -m kvutils.<tool>` is starting: see kvutils.interrupt
    from .interrupt import quiet_while_starting

    quiet_while_starting(_sys.orig_argv)

from .cache import OPS, parse_op  # noqa: E402 (after the handler: importing torch takes seconds)
from .engines import cache_layers, greedy, prefill  # noqa: E402
from .models import Loaded, ModelNotAvailable, load  # noqa: E402

__all__ = ["OPS", "Loaded", "ModelNotAvailable", "cache_layers", "greedy", "load", "parse_op", "prefill"]
__version__ = "0.1.0"
