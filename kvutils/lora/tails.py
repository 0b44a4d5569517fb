"""The LoRA tail: a LoRA adapter on the last k of a model's L decoder layers, and its activated
variant (aLoRA), which peft applies only from a marker's tokens on.

Why a tail: a serving system that switches from the base model to an adapter in mid-sequence
holds a cache the base model computed. An adapter that only touches layers L−k … L−1 leaves the
inputs of layers 0 … L−k−1 unchanged, so their cached K/V stay bit-identical by construction and
only the tail needs recomputing — from the hidden states at the boundary (layer L−k), which the
base model's prefill already produced (see kvutils.lora.boundary and kvutils.lora.switching).

peft does the adapter work: `layers_to_transform` for the tail, `alora_invocation_tokens` for the
activated variant (adapter on only from the marker on).
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from kvutils.core.checks import check_list
from kvutils.lora.families import Family, family_of, model_type, unwrap

TARGETS = ("q", "k", "v", "o", "mlp")  # the logical names `targets` accepts


def parse_targets(targets: str, parameter: str = "targets") -> list[str]:
    """"q,k,v,o,mlp" -> ["q", "k", "v", "o", "mlp"], each checked."""
    return check_list(parameter, targets, TARGETS)


def check_k(k: int, n_layers: int, model_name: str = "", parameter: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_layers:
        raise ValueError(f"{parameter}: k={k!r} is not allowed for {model_name or 'this model'}, which has "
                         f"{n_layers} layers; k must be an integer from 1 to {n_layers} (k = {n_layers} "
                         "puts the adapter on every layer)")
    return k


def first_changed_layer(n_layers: int, k: int, targets: Sequence[str], family: Family) -> int:
    """The first layer whose cached K/V an adapter on the last k layers can change: the first tail
    layer if the adapter touches the projections that make its keys or values, else the next one
    (its K/V then only see the changed output of the layer below). Layers below stay bit-identical
    to the base cache."""
    return n_layers - k if family.changes_kv(targets) else n_layers - k + 1


def lora_tail(model: torch.nn.Module, k: int, r: int, alpha: float,
              targets: str | Sequence[str] = "q,k,v,o,mlp",
              *, adapter_name: str | None = None, invocation_tokens: Sequence[int] | None = None,
              random_init: bool = False, seed: int = 0):
    """Add a LoRA adapter of rank `r` on the last `k` decoder layers and make it the active one.

    `model` is a transformers causal LM (wrapped into a peft model) or a peft model from an earlier
    call (the adapter is added beside the others). `invocation_tokens` makes it an *activated* LoRA:
    peft applies it only from the last occurrence of those tokens on, so everything before them is
    computed by the base weights. peft initialises B = 0 (the adapter starts as the identity);
    `random_init=True` makes B random too, as tests need a non-trivial adapter. Returns the peft model.
    """
    from peft import LoraConfig, get_peft_model

    inner = unwrap(model)
    n_layers = (getattr(inner.config, "text_config", None) or inner.config).num_hidden_layers
    check_k(k, n_layers)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"rank: r={r!r} is not allowed; the rank must be an integer >= 1")
    targets = parse_targets(targets) if isinstance(targets, str) else list(targets)
    family = family_of(model_type(model))
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                        target_modules=family.target_modules(targets),
                        layers_to_transform=list(range(n_layers - k, n_layers)),
                        layers_pattern=family.layers.rsplit(".", 1)[-1],
                        init_lora_weights=not random_init,
                        alora_invocation_tokens=list(invocation_tokens) if invocation_tokens else None)
    name = adapter_name or f"tail{k}"
    with torch.random.fork_rng(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft calls a deprecated transformers helper
        torch.manual_seed(seed)
        if hasattr(model, "peft_config"):
            model.add_adapter(name, config)
            peft_model = model
        else:
            peft_model = get_peft_model(model, config, adapter_name=name)
    peft_model.set_adapter(name)
    peft_model.eval()
    return peft_model


def adapter_parameters(peft_model, adapter_name: str) -> list[torch.nn.Parameter]:
    """The LoRA weights of one adapter; only these train."""
    return [p for n, p in peft_model.named_parameters() if "lora_" in n and f".{adapter_name}." in n]


@contextmanager
def active_adapter(model, adapter_name: str | None) -> Iterator:
    """Make one adapter active (None: the base model, adapters disabled); restore the previous
    state on exit, even after an error. A model without adapters is the base model already."""
    if not hasattr(model, "peft_config"):
        if adapter_name is not None:
            raise ValueError(f"adapter {adapter_name!r} asked for, but the model has no adapters")
        yield model
        return
    previous = model.active_adapter
    try:
        if adapter_name is None:
            with model.disable_adapter():
                yield model
        else:
            model.set_adapter(adapter_name)
            yield model
    finally:
        model.set_adapter(previous)


def invocation_tokens(tokenizer, marker: str) -> list[int]:
    return tokenizer(marker, add_special_tokens=False).input_ids


def check_marker(tokenizer, texts: Sequence[str], marker: str, model_name: str = "",
                 parameter: str = "marker") -> list[int]:
    """The marker's tokens must be the same alone and appended to every text; return them.

    An activated LoRA finds its invocation by searching the input for the marker's token ids, and
    the tail switch appends the marker's tokens to a cached prefix. If the marker merges with the
    text before it (".." after "storm." becomes "..."), the ids are not found, the adapter never
    switches on, and the cached prefix is not the prefix of the full text.
    """
    if not isinstance(marker, str) or not marker:
        raise ValueError(f"{parameter} must be a non-empty string, e.g. '\\nSense:'")
    ids = invocation_tokens(tokenizer, marker)
    for text in texts:
        alone = tokenizer(text, add_special_tokens=True).input_ids
        joined = tokenizer(text + marker, add_special_tokens=True).input_ids
        if joined != alone + ids:
            tail = tokenizer.convert_ids_to_tokens(joined[len(alone) - 1:])
            raise ValueError(
                f"{parameter}: {marker!r} tokenises differently after the text than alone for "
                f"{model_name or 'this tokenizer'}: alone {tokenizer.convert_ids_to_tokens(ids)}, after "
                f"{text[-20:]!r} {tail}. The activated adapter would never find its invocation tokens and "
                "the cached prefix would not be a prefix of the switched sequence; start the marker with a "
                "character that does not merge with the text before it, e.g. a newline ('\\nSense:').")
    return ids
