"""Interrupted at any point, a run loses nothing that was there before: the command-line tools
answer Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM with one line and
exit status 130; SIGKILL leaves the previous results file and page in place; and a page's executed
copy replaces the old one only when every cell ran. (kvutils.core.results' own kill tests cover a
writer killed at every step of saving a run.)"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import papermill
import psutil
import pytest
import yaml

from kvutils.book import chapters
from kvutils.core import interrupt
from kvutils.core.paths import REPO_ROOT
from kvutils.studies import performance as bench

SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}


class Watched:
    """A command-line tool run as a user runs it, in its own process group (so that SIGINT can go
    to the whole group, as a terminal's Ctrl-C does), with its output read as it comes."""

    def __init__(self, argv: list[str], background: bool = False):
        # a background job (`make book &`) starts with SIGINT ignored; one started from a terminal does not
        sigint = signal.SIG_IGN if background else signal.SIG_DFL
        self.proc = subprocess.Popen([sys.executable, "-m", *argv], cwd=REPO_ROOT, stdout=subprocess.PIPE,
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
        code = self.proc.wait(90)
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
    run = Watched(["kvutils.cache.accept", "--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--prefill",
                   "64", "--decode", "64", "--path", "step", "--out", str(out)])
    run.wait_for("accept tiny-llama")  # its progress bar: the run is scoring
    code = run.stop(signal_name)
    _stopped_cleanly(run, code, signal_name)
    if signal_name != "SIGKILL":
        assert f"{out} is as it was" in "".join(run.err)
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
    run = Watched(["kvutils.book.chapters", "05", "--profile", "quick", "--no-pages", "--results-dir", str(res),
                   "--output-dir", str(out)])
    run.wait_for("train tail")  # its progress bar: the kernel is training the first adapter
    kernels = [p for p in run.descendants() if "ipykernel" in " ".join(p.cmdline())]
    assert kernels
    code = run.stop(signal_name)
    _stopped_cleanly(run, code, signal_name)
    assert {path: path.read_text() for path in earlier} == earlier
    assert sorted(p.name for p in res.rglob("*")) == sorted(["figures", f"{name}.json", f"{name}_loss.png"])
    gone = psutil.wait_procs(kernels, timeout=30)[1]  # SIGKILL: a kernel ends when it sees its runner gone
    assert not gone, [p.cmdline() for p in gone]
    left = sorted(p.name for p in (out / chapters.UNFINISHED).iterdir())
    # only SIGKILL leaves the copy being written, named by its writer's pid; the next run deletes it
    assert left == ([f"{name}.{run.proc.pid}.ipynb"] if signal_name == "SIGKILL" else [])
    if left:
        chapters._remove_orphans(out / chapters.UNFINISHED)
        assert not list((out / chapters.UNFINISHED).iterdir())


@pytest.mark.parametrize("signal_name, background", [("SIGINT", False), ("SIGTERM", True)])
def test_the_lanes_interrupted_stop_every_kernel(tmp_path, signal_name, background):
    """`make book`'s lanes (quick profile), stopped from a terminal or killed as a background job:
    every lane and kernel ends, each with its one line, and no chapter's results are written."""
    res, out = tmp_path / "results", tmp_path / "pages"
    run = Watched(["kvutils.book.chapters", "--lanes", "--profile", "quick", "--no-pages", "--results-dir", str(res),
                   "--output-dir", str(out)], background)
    run.wait_for("train tail")  # chapter 5 trains in one lane, chapter 4 scores in the other
    started = run.descendants()
    assert sum("ipykernel" in " ".join(p.cmdline()) for p in started) == 2
    code = run.stop(signal_name)
    _stopped_cleanly(run, code, signal_name)
    assert not psutil.wait_procs(started, timeout=30)[1]
    assert sorted(p.name for p in res.iterdir()) == ["04_decode_timing.json"]  # timed before the lanes
    assert not list((out / chapters.UNFINISHED).iterdir())


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_a_tool_interrupted_while_it_imports_says_one_line(signal_name):
    """Importing torch takes seconds before a tool's main sets its handlers; a signal then is one
    line too, not a traceback from inside an import."""
    run = Watched(["kvutils.cache.accept", "--model", "tiny-llama", "--op", "exact", "--docs", "pydoc"])
    time.sleep(1.5)  # past the interpreter's own start (no Python handler can exist before it), inside the imports
    code = run.stop(signal_name)
    assert code == interrupt.INTERRUPTED
    # on a fast machine the imports may be done, and accept's own one line answers
    assert "".join(run.err).strip() in ("interrupted while starting; nothing was written", "interrupted; nothing written")


def test_a_failing_chapter_prints_its_error_not_the_runners_traceback(monkeypatch, capsys):
    def failing(chapter, *args, **kwargs):
        err = papermill.PapermillExecutionError(3, 3, "x = 1", "ValueError", "n_prompts must be >= 1, got 0", [])
        err.add_note("chapter 01: notebooks/01_cache_exactness.ipynb failed in cell 3 with ValueError: n_prompts ...")
        raise err

    monkeypatch.setattr(chapters, "run_chapter", failing)
    assert chapters.cli(["01", "--no-pages"]) == 1
    err = capsys.readouterr().err
    assert err == "chapter 01: notebooks/01_cache_exactness.ipynb failed in cell 3 with ValueError: n_prompts ...\n"


def test_sigterm_runs_every_finally_and_prints_one_line(capsys):
    cleaned = []

    def main(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
            return 0
        finally:
            cleaned.append(True)

    assert interrupt.run_cli(main, None, "nothing changed") == interrupt.INTERRUPTED
    assert cleaned == [True]
    assert capsys.readouterr().err == "interrupted; nothing changed\n"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))
    assert signal.getsignal(signal.SIGTERM) is not interrupt._raise_interrupt


# --------------------------------------------------------------------------- a page's executed copy as one unit


def _fake_papermill(monkeypatch, fail: str | None = None):
    """papermill.execute_notebook writing a one-cell executed copy; with `fail`, a copy whose cell
    failed with that exception name, as papermill leaves it."""

    def execute(source, output, **kwargs):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
        nb.metadata["widgets"] = {"state": {}}
        nbformat.write(nb, output)
        if fail:
            raise papermill.PapermillExecutionError(0, 1, "x = 1", fail, "boom", [])

    monkeypatch.setattr(papermill, "execute_notebook", execute)


def test_a_successful_run_replaces_the_page(tmp_path, monkeypatch):
    _fake_papermill(monkeypatch)
    (tmp_path / "02_bert_contrast.ipynb").write_text("old")
    output = chapters.run_chapter("02", "quick", tmp_path / "results", tmp_path)
    nb = nbformat.read(output, as_version=4)
    assert nb.cells[0].source == "x = 1" and "widgets" not in nb.metadata
    assert not list((tmp_path / chapters.UNFINISHED).iterdir())


def test_a_failed_run_keeps_the_page_and_names_its_copy(tmp_path, monkeypatch):
    _fake_papermill(monkeypatch, fail="ValueError")
    page = tmp_path / "02_bert_contrast.ipynb"
    page.write_text("old")
    with pytest.raises(papermill.PapermillExecutionError) as err:
        chapters.run_chapter("02", "quick", tmp_path / "results", tmp_path)
    failed = tmp_path / chapters.UNFINISHED / "02_bert_contrast.failed.ipynb"
    assert page.read_text() == "old" and failed.is_file()
    assert f"the executed copy, error included, is {failed}" in err.value.__notes__[0]
    assert "as it was" in err.value.__notes__[0]
    _fake_papermill(monkeypatch)  # the next success clears the failed copy
    chapters.run_chapter("02", "quick", tmp_path / "results", tmp_path)
    assert not failed.exists() and page.read_text() != "old"


def test_an_interrupted_run_keeps_the_page_and_no_copy(tmp_path, monkeypatch):
    _fake_papermill(monkeypatch, fail="KeyboardInterrupt")
    (tmp_path / "02_bert_contrast.ipynb").write_text("old")
    with pytest.raises(papermill.PapermillExecutionError):
        chapters.run_chapter("02", "quick", tmp_path / "results", tmp_path)
    assert (tmp_path / "02_bert_contrast.ipynb").read_text() == "old"
    assert not list((tmp_path / chapters.UNFINISHED).iterdir())


def test_copies_of_killed_runners_are_removed_and_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    for name in (f"01_cache_exactness.{dead}.ipynb", f"02_bert_contrast.{os.getpid()}.ipynb",
                 "03_sense_probes.failed.ipynb"):
        (tmp_path / name).write_text("{}")
    chapters._remove_orphans(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["02_bert_contrast." + str(os.getpid()) + ".ipynb",
                                                          "03_sense_probes.failed.ipynb"]


def test_the_book_skips_unfinished_copies_and_reruns(tmp_path):
    """Copies under .unfinished/ and notebooks a rerun wrote under runs/ would be pages outside
    the table of contents, a warning that fails the -W build."""
    from sphinx.util.matching import Matcher

    excluded = Matcher(yaml.safe_load((REPO_ROOT / "_config.yml").read_text())["exclude_patterns"])
    unfinished = Path(chapters.EXECUTED_DIR.relative_to(REPO_ROOT)) / chapters.UNFINISHED
    for path in (unfinished / "01_cache_exactness.123.ipynb", unfinished / "01_cache_exactness.failed.ipynb",
                 Path("runs/01_cache_exactness-20261201-000000/out.ipynb"), Path("runs/out.ipynb")):
        assert excluded(path.as_posix()), path
    assert not excluded((chapters.EXECUTED_DIR.relative_to(REPO_ROOT) / "01_cache_exactness.ipynb").as_posix())


# --------------------------------------------------------------------------- output folders, before any work


@pytest.fixture
def nothing_runs(monkeypatch):
    def fail(*args, **kwargs):
        pytest.fail("work started before the output folders were checked")

    from kvutils.studies.cache_approximations import study as approx_study

    monkeypatch.setattr(chapters, "run_chapter", fail)
    monkeypatch.setattr(approx_study, "time_alone", fail)
    monkeypatch.setattr(bench, "bench_load", fail)
    monkeypatch.setattr(bench.models, "load", fail)


def _usage_error(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize("argv, words", [
    (["07"], "chapters: '07' unknown; choose from 01, 02, 03, 04, 05, 06, A, B or 'pages'"),
    (["01", "--results-dir", "{file}"], "--results-dir: {file} is a file, not a folder"),
    (["--lanes", "--results-dir", "{file}/sub"], "--results-dir: {file}/sub cannot be a folder: {file} is a file"),
    (["01", "--results-dir", "/proc/kvutils-results"], "--results-dir: /proc/kvutils-results cannot be created in /proc"),
    (["04", "--results-dir", "{json_dir}"], "--results-dir: {json_dir}/04_cache_approximations.json is a folder"),
    (["01", "--output-dir", "{file}"], "--output-dir: {file} is a file, not a folder"),
    (["pages", "--results-dir", "{missing}"], "--results-dir: '{missing}' is not a folder; the summary pages read"),
    (["pages", "--results-dir", ""], "--results-dir: '' is not a folder; the summary pages read"),
    (["01", "-p", "models", "x", "--lanes"], "--lanes runs every chapter with its own defaults"),
    (["02", "-p", "batchsize", "4"], "batchsize: not a parameter of 02_bert_contrast (did you mean batch_size?)"),
    (["01", "--results-dir", ""], "--results-dir must be a folder path (a non-empty string), got ''"),
    (["01", "--results-dir", "{missing}"], "--results-dir: the summary pages need 02_bert_contrast.json, "
                                          "03_sense_probes.json, 04_cache_approximations.json, 05_qwen3_switch.json, "
                                          "bench.json in {missing}, which this run does not write"),
    (["pages", "--results-dir", "{empty}"], "--results-dir: the summary pages need 01_cache_exactness.json"),
    (["01", "05", "-p", "n_prompts", "4"], "n_prompts: not a parameter of 05_qwen3_switch"),
])
def test_the_chapters_runner_checks_its_folders_before_any_work(tmp_path, capsys, nothing_runs, argv, words):
    places = {"file": tmp_path / "a-file", "json_dir": tmp_path / "r", "missing": tmp_path / "none",
              "empty": tmp_path / "empty"}
    places["empty"].mkdir()
    places["file"].write_text("x")
    (places["json_dir"] / "04_cache_approximations.json").mkdir(parents=True)
    argv = [a.format(**places) for a in argv]
    started = time.time()
    message = _usage_error(chapters.main, argv, capsys)
    assert message.startswith("python -m kvutils.chapters: error: ")
    assert words.format(**places) in message
    assert time.time() - started < 10


@pytest.mark.parametrize("case, words", [
    ("a file", "--results-dir: {dir} is a file, not a folder"),
    ("empty", "--results-dir must be a folder path (a non-empty string), got ''"),
    ("empty setup_seconds.txt", "setup_seconds.txt should hold the set-up's seconds, but holds ''"),
    ("truncated chapter_lanes.json", "chapter_lanes.json is damaged"),
    ("truncated chapter results", "01_cache_exactness.json is not a valid results file"),
])
def test_the_benchmark_checks_its_folder_and_inputs_before_any_model(tmp_path, capsys, nothing_runs, case, words):
    folder = tmp_path / "results"
    if case == "empty":
        folder = ""
    elif case == "a file":
        folder.write_text("x")
    else:
        folder.mkdir()
        file, text = {"empty setup_seconds.txt": ("setup_seconds.txt", "\n"),
                      "truncated chapter_lanes.json": ("chapter_lanes.json", '{"lanes": [['),
                      "truncated chapter results": ("01_cache_exactness.json", '{"numbers": {')}[case]
        (folder / file).write_text(text)
    message = _usage_error(bench.main, ["--quick", "--results-dir", str(folder)], capsys)
    assert message.startswith("python -m kvutils.bench: error: --results-dir")
    assert words.format(dir=folder) in message
