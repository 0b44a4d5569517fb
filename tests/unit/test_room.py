"""A full disk is refused before the work (issue 52, 4): the results folder's free room against what
the run writes (the previous results and their figures, at least kvutils.core.room.MIN_FREE), in
the notebook's first cell and in the runners' checks, with shutil.disk_usage monkeypatched."""
from __future__ import annotations

import json
import shutil
from collections import namedtuple

import pytest

from kvutils import build
from kvutils.core import params, results, room

Usage = namedtuple("Usage", "total used free")


def _free(monkeypatch, free: int) -> list:
    asked = []

    def disk_usage(path):
        asked.append(path)
        return Usage(10 * 2**30, 10 * 2**30 - free, free)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    return asked


def _previous_run(folder, chapter: str, figure_bytes: int) -> int:
    (folder / "figures").mkdir(parents=True)
    with open(folder / "figures" / "a.png", "wb") as f:
        f.truncate(figure_bytes)  # sparse: its size without its blocks
    record = folder / f"{chapter}.json"
    figures = {"a": {"file": "figures/a.png", "sha256": "x"}}
    record.write_text(json.dumps({"chapter": chapter, "figures": figures}))
    return record.stat().st_size + figure_bytes


def test_40_kb_free_is_refused_naming_the_folder_and_the_room(tmp_path, monkeypatch):
    asked = _free(monkeypatch, 40 * 2**10)
    with pytest.raises(ValueError, match=r"^results_dir: only 40 KB free on the disk of .*05_qwen3_switch's "
                                         r"results need about 8\.0 MB"):
        results.check_output(tmp_path / "new" / "folder", "05_qwen3_switch")
    assert asked == [tmp_path]  # the folder does not exist yet: its nearest existing parent's disk


def test_room_follows_the_previous_results_size(tmp_path, monkeypatch):
    size = _previous_run(tmp_path, "04_cache_approximations", 20 * 2**20)
    assert room.previous_size(tmp_path, "04_cache_approximations") == size
    _free(monkeypatch, 12 * 2**20)  # more than the minimum, less than the previous run took
    with pytest.raises(ValueError, match=r"only 12\.0 MB free .* need about 20\.0 MB"):
        results.check_output(tmp_path, "04_cache_approximations")
    _free(monkeypatch, 21 * 2**20)
    assert results.check_output(tmp_path, "04_cache_approximations") == tmp_path
    assert room.previous_size(tmp_path, "01_cache_exactness") == 0  # another chapter's figures are not its


def test_enough_room_passes(tmp_path, monkeypatch):
    _free(monkeypatch, room.MIN_FREE)
    assert results.check_output(tmp_path, "01_cache_exactness") == tmp_path


def test_the_first_cell_refuses_a_full_disk_before_any_work(tmp_path, monkeypatch):
    _free(monkeypatch, 40 * 2**10)
    namespace = {"results_dir": str(tmp_path)}
    with pytest.raises(ValueError, match=r"^results_dir: only 40 KB free"):
        params.check_notebook(namespace, "05_qwen3_switch", {"results_dir": "results"})


def test_the_build_job_refuses_a_full_disk_before_a_kernel(tmp_path, monkeypatch, capsys):
    _free(monkeypatch, 40 * 2**10)
    started = []
    monkeypatch.setattr("kvutils.book.chapters.run_chapter", lambda *a, **k: started.append(a))
    assert build.main(["05", "--profile", "quick", "--results-dir", str(tmp_path)]) == 2
    assert started == [] and "--results-dir: only 40 KB free" in capsys.readouterr().err
