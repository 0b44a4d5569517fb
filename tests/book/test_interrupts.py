"""Interrupted at any point, a run loses nothing that was there before: the command-line tools
answer Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM with one line and
exit status 130; SIGKILL leaves the previous results file and page in place. (tests/unit/test_chapter_runner.py
checks, without a notebook, that a page's executed copy replaces the old one only when every cell ran;
kvutils.core.results' own kill tests cover a writer killed at every step of saving a run.)"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from kvutils.book import chapters
from kvutils.core import interrupt
from kvutils.core.paths import REPO_ROOT

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


class Watched:
    """A command-line tool run as a user runs it, in its own process group (so that SIGINT can go
    to the whole group, as a terminal's Ctrl-C does), with its output read as it comes."""

    def __init__(self, argv: list[str], background: bool = False, module: bool = True):
        # a background job (`make book &`) starts with SIGINT ignored; one started from a terminal does not
        sigint = signal.SIG_IGN if background else signal.SIG_DFL
        self.proc = subprocess.Popen([sys.executable, "-m", *argv] if module else argv, cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, sigint))
        self.out, self.err = [], []
        self.readers = [threading.Thread(target=self._read, args=(stream, into), daemon=True)
                        for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, into):
        for line in iter(stream.readline, ""):
            into.append(line)

    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)

    def wait_for(self, words: str, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while words not in self.text():
            assert self.proc.poll() is None, f"ended before {words!r}:\n{self.text()[-3000:]}"
            assert time.time() < deadline, f"no {words!r} after {timeout} s:\n{self.text()[-3000:]}"
            time.sleep(0.1)

    def descendants(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children(recursive=True)

    def stop(self, signal_name: str) -> int:
        if signal_name == "SIGINT":
            os.killpg(self.proc.pid, signal.SIGINT)
        else:
            self.proc.send_signal(SIGNALS[signal_name])
        said, deadline = None, time.time() + 90
        while self.proc.poll() is None and time.time() < deadline:  # when it said so, and when it ended
            if said is None and "interrupted" in "".join(self.err):
                said = time.time()
            time.sleep(0.02)
        code = self.proc.wait(1)
        self.ended_after_saying_s = None if said is None else time.time() - said
        for reader in self.readers:
            reader.join(10)
        return code


def _stopped_cleanly(run: Watched, code: int, signal_name: str) -> None:
    err = "".join(run.err)
    if signal_name == "SIGKILL":
        assert code == -signal.SIGKILL
    else:
        assert code == interrupt.INTERRUPTED, run.text()[-3000:]
        assert err.strip().splitlines()[-1].startswith("interrupted; "), err[-3000:]
        assert "Traceback" not in err, err[-3000:]


@pytest.mark.parametrize("signal_name", list(SIGNALS))
def test_the_accept_cli_interrupted_mid_run(tmp_path, signal_name):
    """Exit 130 with one line and no traceback (SIGINT, SIGTERM); --out is never half-written."""
    out = tmp_path / "accept.json"
    out.write_text('{"earlier": true}\n')
    run = Watched(["kvutils.accept", "--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--prefill",
                   "64", "--decode", "64", "--path", "step", "--out", str(out)])
    run.wait_for("accept tiny-llama")  # its progress bar: the run is scoring
    code = run.stop(signal_name)
    _stopped_cleanly(run, code, signal_name)
    if signal_name != "SIGKILL":
        assert f"{out} is as it was" in "".join(run.err)
        # once it has said so, it ends (not seconds of Python's teardown of torch later: issue 27)
        assert run.ended_after_saying_s is not None and run.ended_after_saying_s < 1.0, run.ended_after_saying_s
    assert json.loads(out.read_text()) == {"earlier": True}
    assert [p.name for p in tmp_path.iterdir()] == ["accept.json"]


@pytest.mark.parametrize("signal_name", list(SIGNALS))
def test_a_chapter_interrupted_mid_run_leaves_the_previous_results_and_page(tmp_path, signal_name):
    """The chapters runner stopped while chapter 5 (quick profile) trains: the earlier results
    file, figure and page are untouched, and no kernel runs on."""
    name = chapters.NOTEBOOKS["05"]
    res, out = tmp_path / "results", tmp_path / "pages"
    (res / "figures").mkdir(parents=True)
    out.mkdir()
    earlier = {res / f"{name}.json": '{"numbers": {"earlier": 1}}\n', res / "figures" / f"{name}_loss.png": "png",
               out / f"{name}.ipynb": '{"earlier page": 1}\n'}
    for path, text in earlier.items():
        path.write_text(text)
    run = Watched(["kvutils.chapters", "05", "--profile", "quick", "--no-pages", "--results-dir", str(res),
                   "--output-dir", str(out)])
    run.wait_for("train tail")  # its progress bar: the kernel is training the first adapter
    kernels = [p for p in run.descendants() if "ipykernel" in " ".join(p.cmdline())]
    assert kernels
    code = run.stop(signal_name)
    _stopped_cleanly(run, code, signal_name)
    assert {path: path.read_text() for path in earlier} == earlier
    left_here = sorted(p.name for p in res.rglob("*") if "jobs" not in p.relative_to(res).parts)
    assert left_here == sorted(["figures", f"{name}.json", f"{name}_loss.png"])  # and jobs/: the units a
    # resumed run reads back (kvutils.studies.units), never a record: the interrupted study left none
    assert not list((res / "jobs").glob("*.json"))
    gone = psutil.wait_procs(kernels, timeout=30)[1]  # SIGKILL: a kernel ends when it sees its runner gone
    assert not gone, [p.cmdline() for p in gone]
    left = sorted(p.name for p in (out / chapters.UNFINISHED).iterdir())
    # only SIGKILL leaves the copy being written, named by its writer's pid; the next run deletes it
    assert left == ([f"{name}.{run.proc.pid}.ipynb"] if signal_name == "SIGKILL" else [])
    if left:
        chapters._remove_orphans(out / chapters.UNFINISHED)
        assert not list((out / chapters.UNFINISHED).iterdir())


def _handles(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler of its own for `signum` (its SigCgt mask in /proc)."""
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signum - 1) & 1)


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_tool_interrupted_while_it_imports_says_one_line(signal_name):
    """Importing torch takes seconds before a tool's main sets its handlers; a signal then is one
    line too, not a traceback from inside an import."""
    run = Watched(["kvutils.accept", "--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--prefill", "16",
                   "--decode", "8"])  # valid: its checks pass in a fraction of a second, then torch is imported
    time.sleep(1.5)  # past the interpreter's own start (no Python handler can exist before it), inside the imports
    code = run.stop(signal_name)
    assert code == interrupt.INTERRUPTED
    # on a fast machine the imports may be done, and accept's own one line answers
    assert "".join(run.err).strip() in ("interrupted while starting; nothing was written", "interrupted; nothing written")
