"""The chapters runner and the command lines, without running a notebook: a failing chapter prints
its own error, SIGTERM runs every finally, a page's executed copy replaces the old one only when every
cell ran (papermill faked), and output folders and inputs are checked before any work."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import papermill
import pytest
import yaml

from kvutils.book import chapters
from kvutils.core import interrupt
from kvutils.core.paths import REPO_ROOT
from kvutils.studies import performance as bench


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


def _fake_papermill(monkeypatch, fail: str | None = None, calls: list | None = None):
    """papermill.execute_notebook writing a one-cell executed copy; with `fail`, a copy whose cell
    failed with that exception name, as papermill leaves it. `calls` collects each call's keywords."""

    def execute(source, output, **kwargs):
        if calls is not None:
            calls.append(kwargs)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
        nb.metadata["widgets"] = {"state": {}}
        nbformat.write(nb, output)
        if fail:
            raise papermill.PapermillExecutionError(0, 1, "x = 1", fail, "boom", [])

    monkeypatch.setattr(papermill, "execute_notebook", execute)


def test_a_successful_run_replaces_the_page(tmp_path, monkeypatch):
    from kvutils.book.kernel import IpcKernelManager

    calls: list = []
    _fake_papermill(monkeypatch, calls=calls)
    (tmp_path / "02_bert_contrast.ipynb").write_text("old")
    output = chapters.run_chapter("02", "quick", tmp_path / "results", tmp_path)
    nb = nbformat.read(output, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].source == "x = 1" and "widgets" not in nb.metadata
    assert code[0].metadata.tags == ["hide-input"]  # the page opens with results, its code one click away
    assert nb.cells[0].source == chapters.QUICK_BANNER  # a quick page says so (no title cell here: on top)
    assert calls[0]["parameters"]["results_dir"] == str(tmp_path / "results")  # outside the repository: as given
    assert not list((tmp_path / chapters.UNFINISHED).iterdir())
    assert calls[0]["kernel_manager_class"] is IpcKernelManager  # no TCP warning at each kernel start


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

    from kvutils.studies import units

    monkeypatch.setattr(chapters, "run_chapter", fail)
    monkeypatch.setattr(units, "run_unit", fail)
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
    (["01", "--results-dir", "{file}/sub"], "--results-dir: {file}/sub cannot be a folder: {file} is a file"),
    (["01", "--results-dir", "/proc/kvutils-results"], "--results-dir: /proc/kvutils-results cannot be created in /proc"),
    (["04", "--results-dir", "{json_dir}"], "--results-dir: {json_dir}/04_cache_approximations.json is a folder"),
    (["01", "--output-dir", "{file}"], "--output-dir: {file} is a file, not a folder"),
    (["pages", "--results-dir", "{missing}"], "--results-dir: '{missing}' is not a folder; the summary pages read"),
    (["pages", "--results-dir", ""], "--results-dir: '' is not a folder; the summary pages read"),
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
                      "truncated chapter results": ("01_cache_exactness.json", '{"numbers": {')}[case]
        (folder / file).write_text(text)
    message = _usage_error(bench.main, ["--quick", "--results-dir", str(folder)], capsys)
    assert message.startswith("python -m kvutils.bench: error: --results-dir")
    assert words.format(dir=folder) in message


def test_the_chapters_kernel_runs_over_ipc_and_prints_no_tcp_warning(tmp_path, capfd, monkeypatch):
    """A real kernel started as the runner starts one: it answers over IPC, and ipykernel's warning
    about TCP without encryption (printed by every TCP kernel start) is not there. Its shutdown sends
    no SIGINT (jupyter_client's default interrupts first, and ipykernel may then log "ERROR |
    KeyboardInterrupt caught in kernel." in a run that went well)."""
    from jupyter_client.manager import AsyncKernelManager

    from kvutils.book.kernel import IpcKernelManager

    interrupts = []
    base = AsyncKernelManager._async_interrupt_kernel

    async def counted(self):
        interrupts.append(self.shutting_down)
        await base(self)
    monkeypatch.setattr(AsyncKernelManager, "_async_interrupt_kernel", counted)

    notebook = tmp_path / "in.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")]), notebook)
    papermill.execute_notebook(notebook, tmp_path / "out.ipynb", kernel_name="python3", progress_bar=False,
                               log_output=True, kernel_manager_class=IpcKernelManager)
    printed = capfd.readouterr()
    assert nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[0].outputs[0]["text"] == "42\n"
    assert "TCP without encryption" not in printed.out + printed.err
    assert interrupts == []
    assert IpcKernelManager().transport == "ipc"
    assert IpcKernelManager().ip != IpcKernelManager().ip  # side by side, no two kernels share sockets


def test_a_build_line_is_one_write(monkeypatch):
    """Pages render side by side in threads: each line of the log is written in one call, so two
    threads' lines cannot run into each other (print writes the text and its newline apart)."""
    writes = []

    class Recording:
        def write(self, text):
            writes.append(text)

        def flush(self):
            writes.append(None)
    monkeypatch.setattr(chapters.sys, "stdout", Recording())
    chapters.say("== page-06: rendering")
    assert writes == ["== page-06: rendering\n", None]


def test_a_page_collapses_code_a_cell_did_not_place_itself(tmp_path):
    """Every code cell's input goes behind "show code" unless the cell's own tag says otherwise;
    markdown is untouched; a results folder inside the repository is given as ./<path>, no machine path."""
    cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("p = 1"),
             nbformat.v4.new_code_cell("figure", metadata={"tags": ["remove-input"]}),
             nbformat.v4.new_code_cell("glue()", metadata={"tags": ["remove-cell"]}),
             nbformat.v4.new_code_cell('# Parameters\nresults_dir = "/home/me/results"\nlr = 0.1',
                                       metadata={"tags": ["injected-parameters"]}),
             nbformat.v4.new_code_cell('# Parameters\nresults_dir = "/home/me/results"\n',
                                       metadata={"tags": ["injected-parameters"]})]
    path = tmp_path / "page.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=cells, metadata={"widgets": {"state": {}}}), path)
    chapters.for_the_page(path)
    nb = nbformat.read(path, as_version=4)
    assert [c.metadata.get("tags") for c in nb.cells] == [
        None, ["hide-input"], ["remove-input"], ["remove-cell"], ["injected-parameters", "hide-input"],
        ["injected-parameters", "remove-cell"]]
    assert nb.cells[4].source == "# Parameters\nlr = 0.1"  # the -p values stay; the machine's path goes
    assert "widgets" not in nb.metadata
    assert chapters.results_dir_as_given(REPO_ROOT / "results") == "./results"
    assert chapters.results_dir_as_given(tmp_path) == str(tmp_path)


# ------------------------------------------------------------ a side run never writes the book's page


def test_pages_go_to_the_book_only_with_the_books_results(tmp_path):
    assert chapters.page_dir("results") == chapters.EXECUTED_DIR
    assert chapters.page_dir(REPO_ROOT / "results") == chapters.EXECUTED_DIR
    assert chapters.page_dir(tmp_path / "side") == tmp_path / "side" / chapters.SIDE_PAGES
    assert chapters.page_dir(tmp_path / "side", tmp_path / "mine") == tmp_path / "mine"  # given: kept
    with pytest.raises(ValueError, match=r"^--output-dir: .* holds the book's pages, but this run's"):
        chapters.page_dir(tmp_path / "side", chapters.EXECUTED_DIR)


def test_a_side_run_writes_its_page_beside_its_results_not_over_the_books(tmp_path, monkeypatch):
    """`python -m kvutils.chapters 05 --profile quick --results-dir <elsewhere>` once wrote its executed
    notebook over book/chapters/05_qwen3_switch.ipynb (papermill faked here)."""
    book_page = chapters.EXECUTED_DIR / "05_qwen3_switch.ipynb"
    before = book_page.read_bytes() if book_page.exists() else None
    _fake_papermill(monkeypatch)
    monkeypatch.setattr(chapters, "check_overrides", lambda *a: None)  # the notebook's checks: not the point
    chapters.main(["05", "--profile", "quick", "--results-dir", str(tmp_path / "side"), "--no-pages"])
    assert (tmp_path / "side" / "pages" / "05_qwen3_switch.ipynb").is_file()
    assert (book_page.read_bytes() if book_page.exists() else None) == before
    output = chapters.run_chapter("02", "quick", tmp_path / "other")  # the function's default, too
    assert output == tmp_path / "other" / "pages" / "02_bert_contrast.ipynb"


def test_a_side_run_naming_the_books_folder_is_refused_before_any_work(tmp_path, capsys, nothing_runs):
    argv = ["05", "--profile", "quick", "--results-dir", str(tmp_path / "side"),
            "--output-dir", str(chapters.EXECUTED_DIR)]
    message = _usage_error(chapters.main, argv, capsys)
    assert "--output-dir: " in message and "holds the book's pages" in message


def test_a_build_job_with_other_results_writes_its_pages_beside_them(tmp_path, monkeypatch, capsys):
    from kvutils import build
    from kvutils.book import build_jobs

    given = []
    monkeypatch.setattr(build_jobs, "run_job",
                        lambda job, profile, results_dir, output_dir, *a: given.append(output_dir))
    assert build.main(["05", "--profile", "quick", "--results-dir", str(tmp_path / "side")]) in (0, None)
    assert given == [str((tmp_path / "side" / "pages").resolve())]
    assert build.main(["05", "--profile", "quick", "--results-dir", str(tmp_path / "side"),
                       "--output-dir", str(chapters.EXECUTED_DIR)]) == 2
    assert "holds the book's pages" in capsys.readouterr().err and len(given) == 1


# --------------------------------------------------------------------------- kernels' sockets after SIGKILL


def _socket_file(path: Path) -> Path:
    import socket

    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))  # the file stays after the socket closes, as a killed kernel's does
    sock.close()
    return path


def test_a_start_removes_the_sockets_of_killed_runners_only(monkeypatch):
    """A runner killed by SIGKILL leaves its kernel's socket files; the next start removes those
    whose runner is dead, and keeps a live runner's and any other file."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="ks", dir="/tmp"))  # a Unix socket's path has at most 107 bytes

    from kvutils.book.kernel import PREFIX, IpcKernelManager

    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    killed.kill()  # SIGKILL
    killed.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        dead = [_socket_file(tmp_path / f"{PREFIX}{killed.pid}-{'a' * 16}-{port}") for port in range(1, 6)]
        live = _socket_file(tmp_path / f"{PREFIX}{alive.pid}-{'b' * 16}-1")
        other = _socket_file(tmp_path / "kernel-ipc-1")
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        ip = IpcKernelManager().ip
        assert not any(p.exists() for p in dead)
        assert live.exists() and other.exists()
        assert Path(ip).parent == tmp_path and Path(ip).name.startswith(f"{PREFIX}{os.getpid()}-")
    finally:
        alive.kill()
        alive.wait()
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_a_quick_page_says_so_under_its_title(tmp_path):
    """The quick profile's pages are tiny random models: each carries QUICK_BANNER right after its
    title (once, however often the page is processed); a full-profile page carries none."""
    cells = [nbformat.v4.new_code_cell("p = 1"), nbformat.v4.new_markdown_cell("# Title"),
             nbformat.v4.new_code_cell("x = 2")]
    for profile, expected in (("quick", 1), ("full", 0)):
        path = tmp_path / f"{profile}.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
        chapters.for_the_page(path, profile)
        chapters.for_the_page(path, profile)
        nb = nbformat.read(path, as_version=4)
        banners = [i for i, c in enumerate(nb.cells) if chapters.QUICK_TAG in c.metadata.get("tags", [])]
        assert len(banners) == expected
        if expected:
            assert banners == [2] and nb.cells[2].source == chapters.QUICK_BANNER
            assert nb.cells[2].source.startswith("```{warning}") and "random weights" in nb.cells[2].source
