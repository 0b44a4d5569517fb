"""Forward hooks as context managers that always remove themselves.

Hook points are named by module path (`model.get_submodule(name)`), as in TransformerLens:
`encoder.layer.1.attention.self.key` is BERT's key projection in its second layer.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def capture_outputs(model: torch.nn.Module, names: list[str]) -> Iterator[dict[str, torch.Tensor]]:
    """Record the output of each named submodule during forwards inside the block.
    Yields a dict name -> last output (detached); the hooks are removed on exit, even on error."""
    captured: dict[str, torch.Tensor] = {}
    handles = []
    try:
        for name in names:
            module = model.get_submodule(name)
            handles.append(module.register_forward_hook(
                lambda _m, _inp, out, name=name: captured.__setitem__(name, out.detach())))
        yield captured
    finally:
        for handle in handles:
            handle.remove()


def bert_key_modules(model: torch.nn.Module) -> list[str]:
    """Module paths of a BERT-family encoder's per-layer key projections, in layer order."""
    names = [n for n, _ in model.named_modules() if n.endswith("attention.self.key")]
    if not names:
        raise ValueError(f"{type(model).__name__} has no BERT-style 'attention.self.key' modules")
    return names
