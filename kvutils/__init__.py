"""kvutils: the helper package behind "How the KV cache works".

Public API (stable; readers and every chapter call these):
    load(name, dtype=torch.float32) -> Loaded   (.model, .tokenizer, .name, .family)
    greedy(loaded, input_ids, new_tokens, use_cache) -> (token_ids, step_logits)
    OPS, parse_op("window:size=128,sinks=4")    (the registered cache operations)
    kvutils.accept.accept(model, op, docs, prefill=256, decode=256) -> dict
                                                (KL, top-1, perplexity vs the exact cache; also a CLI)

Importing kvutils is light: each name loads its module (and torch) when first used.
The layers, each importing only from those above it in this list: core, models, cache, lora,
studies, report, explorer, book (see the map in CONTRIBUTING.md).
"""
from __future__ import annotations

import importlib

_PUBLIC = {  # name -> the module that defines it
    "OPS": "kvutils.cache.registry", "parse_op": "kvutils.cache.registry",
    "cache_layers": "kvutils.models.greedy", "greedy": "kvutils.models.greedy",
    "prefill": "kvutils.models.greedy",
    "Loaded": "kvutils.models.loading", "ModelNotAvailable": "kvutils.models.registry",
    "load": "kvutils.models.loading",
}
__all__ = sorted(_PUBLIC)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'kvutils' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
