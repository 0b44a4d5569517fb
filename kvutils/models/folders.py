"""A model in a folder: a local directory, or a Hugging Face hub snapshot already on this machine.

Its files are checked before anything loads (config.json, a tokenizer, safetensors weights whose
headers read), so that a bad folder is an error naming the file, not a failure deep in
transformers. Nothing is downloaded, and a model that needs its own Python code is refused.
"""
from __future__ import annotations

import ast
import functools
import importlib.util
import json
import sys
from pathlib import Path

from kvutils.models.registry import EMBEDDED, ModelNotAvailable, Resolved

# files any one of which gives transformers' AutoTokenizer something to load
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model",
                   "sentencepiece.bpe.model")
# the tokenizer's files that are JSON, checked to parse before transformers reads them
JSON_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json")


def cached_snapshot(repo_id: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json")
    return Path(config).parent if isinstance(config, str) else None


def hub_snapshot(repo_id: str, parameter: str = "models") -> Path:
    snapshot = cached_snapshot(repo_id)
    if snapshot is None:
        raise ModelNotAvailable(
            f"{parameter}: model {repo_id!r}: its weights are not on this machine (not in the local Hugging "
            "Face cache, and this code never downloads at run time). On a machine with hub access run "
            f"`hf download {repo_id}` (or `huggingface-cli download {repo_id}`), then rerun; or pass "
            f"the local directory that holds its config.json and *.safetensors. Embedded models that "
            f"work here: {', '.join(EMBEDDED)}."
        )
    return snapshot


def resolve_folder(name: str, path: Path, parameter: str = "models") -> Resolved:
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
    parsed = {}
    for file in (path / f for f in JSON_TOKENIZER_FILES):
        try:
            if file.is_file():
                parsed[file.name] = json.loads(file.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(
                f"{where}: {file} is not valid UTF-8 JSON ({err}); the tokenizer is damaged") from None
    from safetensors import SafetensorError, safe_open

    shapes = {}
    for file in weights:
        try:
            with safe_open(file, "numpy") as header:  # reads the header only ("pt" would import torch)
                shapes.update({key: header.get_slice(key).get_shape() for key in header.keys()
                               if key.endswith(EMBEDDING_NAMES)})
        except (SafetensorError, OSError) as err:
            raise ValueError(f"{where}: {file} is not a readable safetensors file ({err}); "
                             "it is damaged or truncated") from None
    _check_config_fits_weights(f"{where}: {config_file}", config, shapes)
    _check_vocabulary(where, config_file, config, shapes, tokenizer_ids(path, parsed))
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
                         f"transformers would take its defaults for {config['model_type']}, which do not "
                         "describe these weights")
    width = next((text[k] for k in EMBEDDING_WIDTH_KEYS if text.get(k)), width)
    for name, shape in embeddings.items():
        if len(shape) == 2 and shape[1] != width:
            raise ValueError(f"{where} gives the token embedding width {width}, but the weights' {name} is "
                             f"{shape[0]} x {shape[1]}")


CONFIG_MAPPING = "transformers.models.auto.configuration_auto"
MAPPING_SOURCES = ("models/auto/auto_mappings.py", "models/auto/configuration_auto.py")  # inside transformers


@functools.lru_cache(maxsize=1)
def implemented_model_types() -> frozenset[str]:
    """The model types transformers implements (the keys of its CONFIG_MAPPING_NAMES), read from its
    source files with `ast`: importing the mapping imports torch, seconds of CPU that a folder's
    check before the import must not cost. Where the source is not as expected: the import."""
    if CONFIG_MAPPING not in sys.modules:
        spec = importlib.util.find_spec("transformers")
        found: set[str] = set()
        for source in MAPPING_SOURCES if spec and spec.origin else ():
            try:
                tree = ast.parse((Path(spec.origin).parent / source).read_text(encoding="utf-8"))
            except (OSError, SyntaxError, UnicodeDecodeError):
                break
            # `CONFIG_MAPPING_NAMES = OrderedDict([(type, name), ...])`, `.update({...})`
            for statement in tree.body:
                if "CONFIG_MAPPING_NAMES" not in {n.id for n in ast.walk(statement) if isinstance(n,
                                                                                                  ast.Name)}:
                    continue
                for node in ast.walk(statement):
                    if isinstance(node, ast.Tuple) and len(node.elts) == 2 and isinstance(node.elts[0],
                                                                                          ast.Constant):
                        found.add(node.elts[0].value)
                    elif isinstance(node, ast.Dict):
                        found.update(k.value for k in node.keys if isinstance(k, ast.Constant))
                    elif isinstance(node, ast.keyword) and isinstance(node.value, ast.Dict):
                        found.update(k.value for k in node.value.keys if isinstance(k, ast.Constant))
        else:
            if len(found) > 100:  # transformers implements hundreds
                return frozenset(n for n in found if isinstance(n, str))
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return frozenset(CONFIG_MAPPING_NAMES)


def tokenizer_ids(path: Path, parsed: dict) -> tuple[int, Path] | None:
    """(the tokenizer's largest token id + 1, the file that says so), read from its files without
    loading it: tokenizer.json (its model's vocabulary and its added tokens), else vocab.json or
    vocab.txt (with tokenizer_config.json's added tokens); None for a sentencepiece model alone."""
    config = parsed.get("tokenizer_config.json")
    added = config.get("added_tokens_decoder") if isinstance(config, dict) else None
    extra = [int(i) for i in added if str(i).isdigit()] if isinstance(added, dict) else []
    whole = parsed.get("tokenizer.json")
    if isinstance(whole, dict):
        model = whole.get("model") if isinstance(whole.get("model"), dict) else {}
        vocab = model.get("vocab")
        ids = ([i for i in vocab.values() if isinstance(i, int)] if isinstance(vocab, dict)
               else [len(vocab) - 1] if isinstance(vocab, list) and vocab else [])
        ids += [t["id"] for t in whole.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get(
            "id"), int)]
        return (max(ids) + 1, path / "tokenizer.json") if ids else None
    vocab = parsed.get("vocab.json")
    if isinstance(vocab, dict):
        ids = [i for i in vocab.values() if isinstance(i, int)] + extra
        return (max(ids) + 1, path / "vocab.json") if ids else None
    if (path / "vocab.txt").is_file():
        with open(path / "vocab.txt", "rb") as fh:
            lines = sum(1 for _ in fh)
        return max([lines - 1, *extra]) + 1, path / "vocab.txt"
    return None


def _check_vocabulary(where: str, config_file: Path, config: dict, embeddings: dict[str, list[int]],
                      tokenizer: tuple[int, Path] | None) -> None:
    """The tokenizer must belong to the model: each id it can give indexes a row of the token
    embedding. A larger vocabulary (another model's tokenizer beside this config) would load, then
    fail at the first such token with "index out of range in self", minutes later."""
    text = config.get("text_config") or config
    vocab_size = text.get("vocab_size")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        return
    for name, shape in embeddings.items():
        if len(shape) == 2 and shape[0] != vocab_size:
            raise ValueError(f"{where}: {config_file} gives vocab_size {vocab_size:,}, but the weights' "
                             f"{name} has {shape[0]:,} rows; the config does not describe these weights")
    if tokenizer is not None and tokenizer[0] > vocab_size:
        raise ValueError(f"{where}: the tokenizer ({tokenizer[1]}) has token ids up to {tokenizer[0] - 1:,}, "
                         f"but {config_file} gives vocab_size {vocab_size:,} (the embedding's rows): the "
                         "tokenizer belongs to another model; put this model's own tokenizer beside its "
                         "config")


def _refuse_custom_code(where: str, config_file: Path, config: dict) -> None:
    """A model that needs its own Python code (auto_map) cannot load: kvutils never passes
    trust_remote_code, so transformers' own hint to pass it does not apply here."""
    if config["model_type"] not in implemented_model_types():
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
