"""What a change recomputes, on a fresh clone holding the quick book's results (issue 49): a comment in
the report layer re-renders the pages and computes no study; a comment in one cache method makes
chapter 4's studies, the benchmark (it times presses) and the pages to compute, and no other study.
`make status` and `make book` say the same."""
import shutil
import subprocess

import pytest
from conftest import tracked_copy

from kvutils.book.jobs import jobs_for

pytestmark = pytest.mark.slow  # the quick book, then its pages rendered again


@pytest.fixture
def clone_with_results(quick_chapters, tmp_path):
    root = tracked_copy(tmp_path / "clone")
    quick, _ = quick_chapters
    shutil.copytree(quick / "results", root / "results")
    shutil.copytree(quick / "book" / "chapters", root / "book" / "chapters", dirs_exist_ok=True)
    return root


def _make(root, *targets: str) -> str:
    done = subprocess.run(["make", "--no-print-directory", *targets, "PROFILE=quick"], cwd=root,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def _status(root) -> dict[str, str]:
    lines = [line.split(None, 1) for line in _make(root, "status").splitlines() if line and not line.startswith("==")]
    return {name: text for name, text in (x for x in lines if len(x) == 2) if name in jobs_for("quick")}


def _studies(status: dict[str, str], state: str) -> set[str]:
    kinds = jobs_for("quick")
    return {n for n, text in status.items() if kinds[n].kind in ("study", "bench") and text.startswith(state)}


def test_a_comment_in_the_report_layer_renders_pages_and_computes_no_study(clone_with_results):
    root = clone_with_results
    names = root / "kvutils" / "report" / "names.py"
    names.write_text(names.read_text() + "\n# a comment\n")
    status = _status(root)
    assert not _studies(status, "to compute"), status
    assert all(status[n].startswith("to compute") for n, j in jobs_for("quick").items() if j.kind == "page"), status
    log = _make(root, "build-jobs")
    for name, job in jobs_for("quick").items():
        if job.kind != "page":
            assert f"== {name}: reused, computed at commit " in log, log
        else:
            assert f"== {name}: rendering: " in log, log
    assert "computing" not in log
    assert not _studies(_status(root), "to compute") and "to compute" not in "".join(_status(root).values())


def test_a_comment_in_one_cache_method_computes_chapter_4_only(clone_with_results):
    root = clone_with_results
    knorm = root / "kvutils" / "cache" / "methods" / "knorm.py"
    knorm.write_text(knorm.read_text() + "\n# a comment\n")
    status = _status(root)
    # chapter 4's scoring studies, and the benchmark, which times presses through the same registry; not the
    # decode timing, whose unit imports no cache method
    assert _studies(status, "to compute") == {"costs", "retrieval-tiny-llama", "04", "bench"}, status
    assert _studies(status, "reused") == {"timing", "01", "02", "03", "05"}, status
