"""Loading a model by name, in eval mode and the asked dtype: `load(name, dtype)` returns a `Loaded`
with `.model`, `.tokenizer`, `.name`, `.family` ("causal" or "encoder").

Weights are only ever read from safetensors (never pickle), and never with `trust_remote_code`.
An embedded model loads from its converted copy (kvutils.models.converted), a tiny one is built
from its config with a fixed seed, any other from its folder (kvutils.models.folders).
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kvutils.models.checks import resolve
from kvutils.models.configs import model_config
from kvutils.models.converted import converted_dir
from kvutils.models.registry import EMBEDDED, TINY, TINY_SEED, Tiny, embedded_file

DTYPES = {"float32": torch.float32, "float64": torch.float64}


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
            path, sha = converted_dir(name), embedded_file(EMBEDDED[name])[1]
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
        raise ValueError("device='auto': the model does not fit in max_memory and part of it would go to "
                         "disk; give offload_folder (a folder for the offloaded weights) or more max_memory")
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
            raise ValueError(
                f"model {name!r}: transformers could not load {path} ({_first_line(err)})") from None
        raise ValueError(f"model {name!r}: {path} needs Python code that ships with the model (an auto_map "
                         "in its config or tokenizer_config.json). kvutils never passes trust_remote_code "
                         "(it runs no code that comes with a model); use a model whose architecture and "
                         "tokenizer transformers implements") from None
    except (OSError, RuntimeError, KeyError, TypeError) as err:
        raise ValueError(f"model {name!r}: transformers could not load {path} "
                         f"({type(err).__name__}: {_first_line(err)})") from None


def _first_line(err: BaseException) -> str:
    return next((line for line in str(err).splitlines() if line.strip()), type(err).__name__)


def load_tokenizer(name: str):
    """The tokenizer alone (fast: no weights), e.g. to validate study words before a model loads.
    One instance per tokenizer folder in a process: nothing here changes a tokenizer, and reading
    one again costs up to a second (Gemma's tokenizer.json is 33 MB of JSON)."""
    resolved = resolve(name)
    if resolved.kind == "tiny":
        name = TINY[name].tokenizer_from
    if resolved.kind == "hf":
        with _load_errors_named(name, resolved.path):
            return _tokenizer(str(resolved.path))
    return _tokenizer(str(converted_dir(name)))


@functools.lru_cache(maxsize=16)
def _tokenizer(path: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, trust_remote_code=False)


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
        if tiny.bias_std:
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if name.endswith(".bias"):
                        param.normal_(0.0, tiny.bias_std)
    return Loaded(model, tokenizer, tiny.key, tiny.family, torch.float32, f"random-seed-{TINY_SEED}")


def per_token_weights(name: str) -> dict[str, int]:
    """{"layers": weights of the decoder layers' linear maps, "head": weights of the output head,
    "parameters": every parameter}: 2 × (layers + head) is a forward pass's FLOPs per token, beside
    attention. Counted on a skeleton built from the model's config on the meta device: no weights
    are read."""
    from transformers import AutoModelForCausalLM

    resolved = resolve(name)
    # as _build_tiny
    vocab = len(load_tokenizer(TINY[name].tokenizer_from)) if resolved.kind == "tiny" else None
    config = model_config(name, resolved, vocab_size=vocab)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    layers = sum(m.weight.numel() for module_name, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and ".layers." in f".{module_name}.")
    return {"layers": layers, "head": model.get_output_embeddings().weight.numel(),
            "parameters": sum(p.numel() for p in model.parameters())}
