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
renamed into place (a unit is there whole or not at all), with the sha256 of each of the two in a
third file (sha256.json) written in the same folder. A unit is checked against its sums when read:
one that cannot be read (a truncated file, an edited tree.json, a sum missing) is never trusted, but
recomputed, and a line on stderr says so. Tuples come back as lists and dict keys as strings. The
same inputs give the same numbers whether a unit was computed or read back: the units are
deterministic given their key (each seeds its own generator).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

ENV = "KVUTILS_CHECKPOINTS"  # the folder of this job's units; unset: nothing is stored
TREE, TENSORS = "tree.json", "tensors.safetensors"
SUMS = "sha256.json"  # {file name: its sha256}, for TREE and TENSORS
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
        sums = {name: _sha256(tmp / name) for name in (TREE, TENSORS)}
        (tmp / SUMS).write_text(json.dumps(sums), encoding="utf-8")
        if target.exists():  # an earlier run of the same inputs stored it: the same value
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class Unreadable(Exception):
    """A stored unit that is there but cannot be trusted; its message says why."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read(path: Path, key: str):
    """The value of the unit in `path`, checked against its sums (Unreadable: why not)."""
    try:
        sums = json.loads((path / SUMS).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise Unreadable(f"no readable {SUMS} ({type(err).__name__})") from None
    for name in (TREE, TENSORS):
        if not isinstance(sums, dict) or not (path / name).is_file() \
                or sums.get(name) != _sha256(path / name):
            raise Unreadable(f"{name} does not match the sha256 stored with it")
    try:
        tree = json.loads((path / TREE).read_text(encoding="utf-8"))
        if tree.get("key") != key:
            raise Unreadable(f"it holds another key ({str(tree.get('key'))[:60]!r})")
        return _join(tree["value"], load_file(str(path / TENSORS)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SafetensorError) as err:
        raise Unreadable(f"{type(err).__name__}: {str(err)[:120]}") from None


def load(root: Path, key: str):
    """The value stored under `key`, or None where there is none. A unit that is there but cannot be
    read, or whose files differ from the sha256 stored with them, gives None too (the caller
    computes it again, and a later `save` replaces it), and a line on stderr says so."""
    path = unit_path(root, key)
    if not path.exists():
        return None
    try:
        return _read(path, key)
    except Unreadable as why:
        print(f"checkpoint: {key} at {path} cannot be read ({why}); computing it again", file=sys.stderr,
              flush=True)
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
