"""Results are written atomically: an interrupted write leaves the previous file intact."""
import json
import math

import matplotlib
import pytest

from kvutils.core import records, results

matplotlib.use("Agg")  # imported here so that the forked writers below do not each import it
import matplotlib.pyplot  # noqa: E402,F401


def test_save_results_records_provenance(tmp_path):
    path = results.save_results(tmp_path, "ch", {"n": 1}, [{"name": "m"}], {"x": float("nan"), "y": 2.5}, 0.0)
    record = json.loads(path.read_text())
    assert record["numbers"] == {"x": None, "y": 2.5} and record["parameters"] == {"n": 1}
    assert record["packages"]["torch"].startswith("2.13.0")
    assert {"git_commit", "machine", "wall_time_s", "finished"} <= set(record)


def test_failed_write_keeps_previous_results(tmp_path):
    path = results.save_results(tmp_path, "ch", {}, [], {"value": 1}, 0.0)
    before = path.read_text()
    with pytest.raises(TypeError):
        results.save_results(tmp_path, "ch", {}, [], {"value": object()}, 0.0)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ch.json"]  # no temporary file left behind


def test_jsonable_converts_tensors_and_non_finite():
    import torch

    out = results.jsonable({"t": torch.tensor([1.0, math.inf]), 3: (1, 2)})
    assert out == {"t": [1.0, None], "3": [1, 2]}


# --------------------------------------------------------------------------- killed at any point of a write

def _writer(folder, run: int, kill_at: str, sig: int) -> None:
    """In a forked process: save run `run` with two figures, sending itself `sig` just before the
    step `kill_at` (e.g. "replace2": the second os.replace of kvutils.core.results)."""
    import os
    import shutil
    import signal

    import matplotlib.pyplot as plt

    # a shell that starts the tests in the background (nohup, `make test &`) ignores SIGINT, and
    # children inherit that: a reader's Ctrl-C is what this test sends, so restore Python's handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    calls = {"replace": 0, "savefig": 0, "rmtree": 0}

    def counting(name, real):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            if f"{name}{calls[name]}" == kill_at:
                os.kill(os.getpid(), sig)
            return real(*args, **kwargs)
        return wrapper

    results.os.replace = counting("replace", os.replace)
    results.shutil.rmtree = counting("rmtree", shutil.rmtree)
    figures = {}
    for name in ("x_one", "x_two"):
        fig = plt.figure()
        plt.title(f"{name} of run {run}")
        fig.savefig = counting("savefig", fig.savefig)
        figures[name] = fig
    results.save_run(folder, "x", {"run": run}, [], {"run": run}, 0.0, figures=figures)


# in one save_run with two figures: savefig 1-2 (staged), replace 1 (the JSON inside the staging
# folder: the commit point), replace 2-3 (the figures into figures/), replace 4 (the JSON), rmtree 1
KILL_POINTS = ["savefig1", "savefig2", "replace1", "replace2", "replace3", "replace4", "rmtree1", "never"]


def _pair(folder):
    """The run number of the results file and of each figure its record names (by sha256)."""
    record = records.load_results(folder, "x")  # a reader: finishes or drops an interrupted run first
    figures = {name: results.sha256_of(folder / entry["file"]) == entry["sha256"]
               for name, entry in record["figures"].items()}
    return record["numbers"]["run"], figures


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGKILL"])
@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_a_killed_run_leaves_the_old_pair_or_the_new_one(tmp_path, kill_at, signal_name):
    """A writer killed at each step of save_run: a reader then sees run 1's results and figures or
    run 2's, never a mix, and no staging folder or temporary file is left."""
    import multiprocessing
    import signal

    def write(run, at):  # a real process, killed by a real signal
        process = multiprocessing.get_context("fork").Process(
            target=_writer, args=(tmp_path, run, at, getattr(signal, signal_name)))
        process.start()
        process.join(120)
        return process.exitcode

    assert write(1, "never") == 0
    first = (tmp_path / "figures" / "x_one.png").read_bytes()
    assert (write(2, kill_at) == 0) == (kill_at == "never")
    run, figures_match = _pair(tmp_path)
    assert figures_match == {"x_one": True, "x_two": True}  # the JSON's figures are the ones on disk
    committed = kill_at in ("replace2", "replace3", "replace4", "rmtree1", "never")
    assert run == (2 if committed else 1)
    assert ((tmp_path / "figures" / "x_one.png").read_bytes() == first) == (not committed)
    leftovers = [p.name for p in [*tmp_path.iterdir(), *(tmp_path / "figures").iterdir()] if p.name.startswith(".")]
    assert not leftovers


def test_stale_temporary_files_of_dead_writers_are_removed(tmp_path):
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [tmp_path / f".x.json.{dead.pid}.abc123.tmp", tmp_path / f".x.{dead.pid}.q1.tmp"]
    live = tmp_path / f".x.json.{__import__('os').getpid()}.abc123.tmp"
    stage = tmp_path / f".x.run-{dead.pid}-abc"
    for path in (*stale, live):
        path.write_text("{")
    stage.mkdir()
    (tmp_path / "keep.txt").write_text("a user's file")
    results.check_output(tmp_path, "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, "keep.txt"])
