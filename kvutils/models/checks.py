"""Checks of a `models` parameter: every name resolves, without loading weights."""
from __future__ import annotations

from kvutils.models import registry as model_registry

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
