"""What a change recomputes, on a fresh clone holding the quick book's results (issue 49): a comment in
the report layer renders the pages and computes no study (the quick book is built so); a comment in one cache method makes
chapter 4's studies, the benchmark (it times presses) and the pages to compute, and no other study.
`make status` and `make book` say the same."""
import json
import shutil
import subprocess

import pytest
from conftest import tracked_copy

from kvutils.book.jobs import jobs_for

pytestmark = pytest.mark.slow  # the quick book


@pytest.fixture
def clone_with_results(quick_chapters, tmp_path):
    root = tracked_copy(tmp_path / "clone")
    quick, _ = quick_chapters
    shutil.copytree(quick / "results", root / "results")
    shutil.copytree(quick / "book" / "chapters", root / "book" / "chapters", dirs_exist_ok=True)
    return root


def _make(root, *targets: str, where: tuple[str, ...] = ()) -> str:
    done = subprocess.run(["make", "--no-print-directory", *targets, "PROFILE=quick", *where], cwd=root,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def _status(root, where: tuple[str, ...] = ()) -> dict[str, str]:
    return _parsed(_make(root, "status", where=where))


def _studies(status: dict[str, str], state: str) -> set[str]:
    kinds = jobs_for("quick")
    return {n for n, text in status.items() if kinds[n].kind in ("study", "bench") and text.startswith(state)}


def _parsed(text: str) -> dict[str, str]:
    lines = [line.split(None, 1) for line in text.splitlines() if line and not line.startswith("==")]
    return {name: text for name, text in (x for x in lines if len(x) == 2) if name in jobs_for("quick")}


def test_a_comment_in_the_report_layer_renders_pages_and_computes_no_study(quick_chapters):
    """The quick book itself is built this way (tests/conftest.py): its studies and one page, then a
    comment in kvutils/report/names.py, then make's jobs, timed. `make status` said the page built
    before the comment was reused, and after it, that every page is to render and no study to
    compute; the build then logged every study and the benchmark reused, rendered every page and
    took under 3 minutes."""
    root, _ = quick_chapters
    change = json.loads((root / "report_change.json").read_text())
    kinds = jobs_for("quick")
    before, after = _parsed(change["status_before"]), _parsed(change["status_after"])
    assert before["page-02"].startswith("reused") and not _studies(before, "to compute"), before
    assert not _studies(after, "to compute"), after
    assert all(after[n].startswith("to compute") for n, j in kinds.items() if j.kind == "page"), after
    log = change["log"]
    for name, job in kinds.items():
        if job.kind != "page":
            assert f"== {name}: reused, computed at commit " in log, log
        else:
            assert f"== {name}: rendering: " in log, log
    assert "computing" not in log
    assert change["seconds"] < 180, change["seconds"]
    where = (f"RESULTS={root / 'results'}", f"EXECUTED={root / 'book' / 'chapters'}")
    assert "to compute" not in "".join(_status(root / "clone", where).values())  # make status agrees


def test_a_comment_in_one_cache_method_computes_chapter_4_only(clone_with_results):
    root = clone_with_results
    knorm = root / "kvutils" / "cache" / "methods" / "knorm.py"
    knorm.write_text(knorm.read_text() + "\n# a comment\n")
    status = _status(root)
    # chapter 4's scoring studies, and the benchmark, which times presses through the same registry; not the
    # decode timing, whose unit imports no cache method
    assert _studies(status, "to compute") == {"costs", "retrieval-tiny-llama", "04", "bench"}, status
    assert _studies(status, "reused") == {"timing", "01", "02", "03", "05"}, status
