"""What a model name means, and whether it can be used here, answered without loading weights.

`resolve(name)` takes a registry key (kvutils.models.registry), a Hugging Face id whose snapshot
is on this machine or a local folder (kvutils.models.folders), so that notebooks can check their
parameters before any model loads; `check_models` checks a whole `models` parameter.
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

from kvutils.models.folders import cached_snapshot, hub_snapshot, resolve_folder
from kvutils.models.registry import EMBEDDED, TINY, Resolved, embedded_file, known_names

# the names of kvutils.models.loading.DTYPES, for checks made before torch loads
DTYPES = ("float32", "float64")
FAMILY_WORDS = {"causal": "a causal (left-to-right) decoder", "encoder": "a bidirectional encoder"}
FAMILY_EXAMPLES = {"causal": "gemma3-270m, smollm2-135m or EleutherAI/pythia-160m",
                   "encoder": "minilm-l6 or bert-base-uncased"}


def parse_model_list(models: str, parameter: str = "models") -> list[str]:
    """Split a comma-separated model string ("gemma3-270m,smollm2-135m") into names."""
    if not isinstance(models, str):
        raise ValueError(f"{parameter} must be one comma-separated string, got {type(models).__name__}")
    names = [m.strip() for m in models.split(",") if m.strip()]
    if not names:
        raise ValueError(f"{parameter} is empty; give one or more of {', '.join(known_names())}, "
                         "a Hugging Face id or a local model directory, separated by commas")
    if len(set(names)) != len(names):
        raise ValueError(f"{parameter} names a model twice: {models!r}")
    return names


_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# transformers also takes ids without an owner (bert-base-uncased, gpt2): the hub's legacy models
_BARE_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*$")


def resolve(name: str, parameter: str = "models") -> Resolved:
    """Check that `name` can be loaded here, without loading weights.

    Raises ValueError for a name that is not a model at all, and ModelNotAvailable (with the
    exact command that obtains the weights) for a valid model whose weights are absent.
    """
    if not isinstance(name, str):
        raise ValueError(f"{parameter}: a model name must be a string, got {name!r}")
    if name in EMBEDDED:
        entry = EMBEDDED[name]
        embedded_file(entry)  # raises ModelNotAvailable with the install command
        return Resolved(name, "embedded", entry.family, entry.context)
    if name in TINY:
        tiny = TINY[name]
        embedded_file(EMBEDDED[tiny.tokenizer_from])  # the tokenizer comes from a real model
        return Resolved(name, "tiny", tiny.family, tiny.context)
    path = Path(name).expanduser()
    if path.is_dir():
        return resolve_folder(name, path, parameter)
    if _HUB_ID.match(name):
        return resolve_folder(name, hub_snapshot(name, parameter), parameter)
    if _BARE_HUB_ID.match(name):
        snapshot = cached_snapshot(name)
        if snapshot is not None:
            return resolve_folder(name, snapshot, parameter)
    close = difflib.get_close_matches(name, known_names(), n=1, cutoff=0.6)
    raise ValueError(
        f"{parameter}: unknown model {name!r}" + (f" (did you mean {close[0]}?)" if close else "")
        + f". Allowed: a registry key ({', '.join(known_names())}), a Hugging Face id such as "
        "EleutherAI/pythia-160m or bert-base-uncased whose weights are in the local Hugging Face cache "
        f"(`hf download {name}` on a machine with hub access puts them there), or a local directory "
        "with config.json, a tokenizer and safetensors weights."
    )


def check_models(name: str, value: str, family: str | None = None, min_context: int = 0,
                 context_from: str = "prompt_tokens + new_tokens") -> list[Resolved]:
    """Resolve every model of a comma-separated string without loading weights."""
    resolved = [resolve(m, parameter=name) for m in parse_model_list(value, name)]
    for r in resolved:
        if family and r.family != family:
            raise ValueError(f"{name}: {r.name} is {FAMILY_WORDS[r.family]}; each model of {name} "
                             f"must be {FAMILY_WORDS[family]}, e.g. {FAMILY_EXAMPLES[family]}")
        if r.context < min_context:
            raise ValueError(f"{name}: {r.name} handles at most {r.context} tokens, but the parameters "
                             f"need {min_context} ({context_from})")
    return resolved
