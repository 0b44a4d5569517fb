"""A model's (text) config from its config file alone: no weights (`config_file`: no torch either)."""
from __future__ import annotations

import json
from types import SimpleNamespace

from kvutils.models.checks import resolve
from kvutils.models.converted import converted_dir
from kvutils.models.registry import TINY, Resolved


def model_config(name: str, resolved: Resolved | None = None, vocab_size: int | None = None):
    """The config a model's weights would load with: a tiny model's from the registry (`vocab_size`
    as its tokenizer sizes it, where the caller needs it), an embedded one's from its converted
    folder, any other from its local folder. A multimodal config gives its text part."""
    from transformers import AutoConfig

    resolved = resolved or resolve(name)
    if resolved.kind == "tiny":
        tiny = TINY[name]
        extra = {} if vocab_size is None else {"vocab_size": vocab_size}
        config = AutoConfig.for_model(tiny.model_type, **extra, **tiny.config)
    else:
        path = converted_dir(name) if resolved.kind == "embedded" else resolved.path
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    return getattr(config, "text_config", None) or config


def config_file(name: str, resolved: Resolved | None = None):
    """A model's config.json as attributes (its text part for a multimodal one), read without
    transformers (whose config classes import torch): what a check before torch loads may read.
    None for a tiny model, whose config transformers completes from its defaults."""
    resolved = resolved or resolve(name)
    if resolved.kind == "tiny":
        return None
    folder = converted_dir(name) if resolved.kind == "embedded" else resolved.path
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return SimpleNamespace(**config.get("text_config", config))
