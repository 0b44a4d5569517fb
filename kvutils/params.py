"""Parameter checks shared by every notebook's first cell.

Each check raises ValueError naming the parameter and what is allowed, and none loads a model,
so a wrong parameter fails in seconds.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch

from . import models as model_registry


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {allowed}, got {value}")
    return value


def check_choice(name: str, value, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{name}: {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")
    return value


def check_list(name: str, value, allowed: Iterable[str]) -> list[str]:
    """A comma-separated string of choices, e.g. dtypes="float32,float64"."""
    allowed = list(allowed)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be one comma-separated string, got {value!r}")
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise ValueError(f"{name}: {', '.join(map(repr, bad)) or 'nothing given'} not allowed; "
                         f"give one or more of {', '.join(allowed)} separated by commas")
    return items


def check_device(device: str) -> str:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:1' or 'mps'") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} asked for, but no CUDA device is available here; use 'cpu'")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device: {device!r} asked for, but MPS is not available here; use 'cpu'")
    return device


FAMILY_WORDS = {"causal": "a causal (left-to-right) decoder", "encoder": "a bidirectional encoder"}
FAMILY_EXAMPLES = {"causal": "gemma3-270m, smollm2-135m or EleutherAI/pythia-160m",
                   "encoder": "minilm-l6 or bert-base-uncased"}


def check_models(name: str, value: str, family: str | None = None, min_context: int = 0,
                 context_from: str = "prompt_tokens + new_tokens") -> list[model_registry.Resolved]:
    """Resolve every model of a comma-separated string without loading weights."""
    resolved = [model_registry.resolve(m, parameter=name) for m in model_registry.parse_model_list(value, name)]
    for r in resolved:
        if family and r.family != family:
            raise ValueError(f"{name}: {r.name} is {FAMILY_WORDS[r.family]}; each model of {name} "
                             f"must be {FAMILY_WORDS[family]}, e.g. {FAMILY_EXAMPLES[family]}")
        if r.context < min_context:
            raise ValueError(f"{name}: {r.name} handles at most {r.context} tokens, but the parameters "
                             f"need {min_context} ({context_from})")
    return resolved


def check_int_list(name: str, value, low: int) -> list[int]:
    """A comma-separated string of integers, e.g. contexts="128,2000"."""
    items = [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else None
    if not items or not all(v.isdigit() for v in items):
        raise ValueError(f"{name} must be integers separated by commas, e.g. \"128,2000\"; got {value!r}")
    numbers = [int(v) for v in items]
    if min(numbers) < low:
        raise ValueError(f"{name}: every value must be >= {low}, got {value!r}")
    return numbers
