"""Checkpoints inside a long job: a unit of work (chapter 5's base pass and each adapter, a group
of documents scored in chapter 4) is stored as it finishes, so that a build interrupted mid-chapter
resumes at the unit it was in, not at the chapter's start.

`make book` (kvutils.book.build_jobs) points KVUTILS_CHECKPOINTS at a folder named by the job's
inputs hash (notebook, parameters, kvutils' sources, pins: the same hash that decides whether the
job reruns), so a stored unit is only ever read back by a run of the same inputs; the folder is
removed once the job's record is written. Where the variable is unset (a notebook run by hand,
the tests), `stored` computes and stores nothing.

A unit's value is a tree of dicts, lists, JSON scalars and tensors: the tensors go to one
safetensors file (never a pickle), the rest to JSON, both written to a temporary folder that is
renamed into place (a unit is there whole or not at all). Tuples come back as lists and dict keys as
strings. The same inputs give the same numbers whether a unit was computed or read back: the units
are deterministic given their key (each seeds its own generator).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from safetensors.torch import load_file, save_file

ENV = "KVUTILS_CHECKPOINTS"  # the folder of this job's units; unset: nothing is stored
TREE, TENSORS = "tree.json", "tensors.safetensors"
_TENSOR = "__tensor__"  # a leaf of the JSON tree that names a tensor of the safetensors file

T = TypeVar("T")


def folder() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


def unit_path(root: Path, key: str) -> Path:
    """A unit's folder: a readable prefix of its key and a digest of all of it (keys carry specs
    with any character, and may be long)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "-", key)[:60]
    return root / f"{readable}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def _split(value, tensors: dict[str, torch.Tensor], seen: dict):
    """The tree with each tensor replaced by {_TENSOR: its name}, the tensors collected in `tensors`.
    A tensor met twice (one per-step record in several operations' lists) is stored once; another
    view of a stored tensor's memory is copied (safetensors stores no shared memory)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        storage = value.untyped_storage().data_ptr()
        view = (storage, value.storage_offset(), tuple(value.shape), value.stride(), value.dtype)
        if view not in seen:
            shared = any(other[0] == storage for other in seen)
            seen[view] = name = str(len(tensors))
            tensors[name] = value.clone() if shared or not value.is_contiguous() else value
        return {_TENSOR: seen[view]}
    if isinstance(value, dict):
        return {str(k): _split(v, tensors, seen) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_split(v, tensors, seen) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"a checkpoint holds dicts, lists, numbers, text and tensors, not {type(value).__name__}")


def _join(value, tensors: dict[str, torch.Tensor]):
    if isinstance(value, dict):
        if set(value) == {_TENSOR}:
            return tensors[value[_TENSOR]]
        return {k: _join(v, tensors) for k, v in value.items()}
    if isinstance(value, list):
        return [_join(v, tensors) for v in value]
    return value


def save(root: Path, key: str, value) -> None:
    """Store `value` under `key`, whole or not at all."""
    root.mkdir(parents=True, exist_ok=True)
    target = unit_path(root, key)
    tensors: dict[str, torch.Tensor] = {}
    tree = {"key": key, "value": _split(value, tensors, {})}
    tmp = Path(tempfile.mkdtemp(prefix=".unit-", dir=root))
    try:
        (tmp / TREE).write_text(json.dumps(tree), encoding="utf-8")
        save_file(tensors, str(tmp / TENSORS))
        if target.exists():  # an earlier run of the same inputs stored it: the same value
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load(root: Path, key: str):
    """The value stored under `key`, or None where there is none (or it cannot be read)."""
    path = unit_path(root, key)
    try:
        tree = json.loads((path / TREE).read_text(encoding="utf-8"))
        if tree.get("key") != key:
            return None
        return _join(tree["value"], load_file(str(path / TENSORS)))
    except (OSError, ValueError, KeyError):
        return None


def remove(root: Path, key: str) -> None:
    """Drop a unit a later one supersedes (a training's progress)."""
    shutil.rmtree(unit_path(root, key), ignore_errors=True)


def stored(key: str, compute: Callable[[], T], root: Path | None = None) -> T:
    """`compute()`, or the value an earlier run of the same job stored under `key` (see the
    module's text). `root`: the checkpoint folder (default: KVUTILS_CHECKPOINTS; none: compute)."""
    root = root or folder()
    if root is None:
        return compute()
    value = load(root, key)
    if value is not None:
        print(f"checkpoint: reused {key}", flush=True)
        return value
    value = compute()
    save(root, key, value)
    return value


def digest(*parts) -> str:
    """A short digest of what a key must pin down (specs, document ids, token ids)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(json.dumps(part, sort_keys=True, default=str).encode() + b"\0")
    return h.hexdigest()[:16]
