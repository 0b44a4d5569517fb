"""Where each architecture keeps its decoder layers and its projections: one table (`FAMILIES`)
maps transformers' `model_type` to the module names a LoRA tail adapts; everything else in
kvutils.lora is family-agnostic."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Family:
    """Where an architecture keeps its decoder layers, and the module names of each logical target."""

    layers: str  # path of the decoder-layer list inside the *ForCausalLM model
    modules: dict[str, tuple[str, ...]]  # logical target -> module names (suffixes) inside a layer

    def target_modules(self, targets: Sequence[str]) -> list[str]:
        return sorted({name for t in targets for name in self.modules[t]})

    def changes_kv(self, targets: Sequence[str]) -> bool:
        """Whether adapting `targets` changes a layer's own keys or values (GPT-NeoX's fused
        query_key_value projection does so even for "q")."""
        return bool(set(self.target_modules(targets)) & set(self.modules["k"] + self.modules["v"]))


_LLAMA_LIKE = Family("model.layers", {
    "q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "o": ("o_proj",),
    "mlp": ("gate_proj", "up_proj", "down_proj")})
FAMILIES = {
    "llama": _LLAMA_LIKE,  # Llama, SmolLM2
    "qwen3": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "gemma3_text": _LLAMA_LIKE,
    # GPT-NeoX (Pythia) computes q, k and v with one fused projection
    "gpt_neox": Family("gpt_neox.layers", {
        "q": ("query_key_value",), "k": ("query_key_value",), "v": ("query_key_value",),
        "o": ("dense",), "mlp": ("dense_h_to_4h", "dense_4h_to_h")}),
}


def family_of(model_type: str, model_name: str = "", parameter: str = "models") -> Family:
    """The module-name mapping of an architecture, or a ValueError naming it and the known ones."""
    if model_type not in FAMILIES:
        raise ValueError(
            f"{parameter}: {model_name or 'the model'} has architecture {model_type!r}, whose decoder-layer "
            f"and projection names kvutils.lora.families does not know; known architectures: "
            f"{', '.join(FAMILIES)}. Add its names to kvutils.lora.families.FAMILIES.")
    return FAMILIES[model_type]


def model_type(model: torch.nn.Module) -> str:
    config = unwrap(model).config
    return (getattr(config, "text_config", None) or config).model_type


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a peft model (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return unwrap(model).get_submodule(family_of(model_type(model)).layers)


def decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack without the language-model head (`model.model`, `gpt_neox`, ...)."""
    return unwrap(model).get_submodule(family_of(model_type(model)).layers.rsplit(".", 1)[0])
