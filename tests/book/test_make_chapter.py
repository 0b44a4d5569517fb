"""`make chapter` as a newcomer types it on a fresh clone (issue 39): the tracked files copied into
an empty folder, no results and no executed page beside them. It computes the one chapter, says
that the summary pages wait for the jobs they read, and builds the HTML of the page that exists
(under -W); a wrong N or -p is refused in one line before any kernel starts."""
import subprocess

import pytest
from conftest import tracked_copy

pytestmark = pytest.mark.slow  # about 70 s: chapter 2 on the quick profile, then jupyter-book


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    """The tracked files as they are in the working tree, and the shared .venv."""
    return tracked_copy(tmp_path_factory.mktemp("clone"))


def _make_chapter(root, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", "chapter", "PROFILE=quick", *args], cwd=root,
                          capture_output=True, text=True, timeout=900)


def test_make_chapter_on_a_fresh_clone_builds_that_page(fresh_clone):
    done = _make_chapter(fresh_clone, "N=02")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "== job pages: skipped: it reads jobs not run yet" in done.stdout
    assert "leaves out the pages not built yet" in done.stdout
    html = fresh_clone / "_build" / "html"
    assert (html / "book" / "chapters" / "02_bert_contrast.html").is_file() and (html / "index.html").is_file()
    assert not (html / "book" / "chapters" / "01_cache_exactness.html").exists()
    assert (fresh_clone / "results" / "02_bert_contrast.json").is_file()


@pytest.mark.parametrize("args, words", [
    (("N=7",), "N=7 is not a chapter; give N=01, 02, 03, 04 or 05"),
    (("N=03", "PARAMS=-p distanc euclidean"), "distanc: not a parameter of 03_sense_probes (did you mean distance?)"),
    (("N=03", "PARAMS=-p distance nonsense"), "distance: 'nonsense' is not allowed; choose one of 'cosine', 'euclidean'"),
])
def test_make_chapter_refuses_in_one_line(fresh_clone, args, words):
    done = _make_chapter(fresh_clone, *args)
    printed = done.stdout + done.stderr
    assert done.returncode != 0 and words in printed
    assert "Traceback" not in printed and "--results-dir" not in printed.replace(
        "--results-dir results", "")  # the command make echoes names it; no refusal does
    assert not (fresh_clone / "results" / "03_sense_probes.json").exists()
