"""make book's jobs (kvutils.book.jobs): what each job's inputs hash covers, so that a job reruns
after a change of its notebook, its parameters, any kvutils source or a pin, and only then."""
import shutil

import pytest

from kvutils.book import jobs
from kvutils.core.paths import REPO_ROOT


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """What the hash reads, copied: kvutils' sources, the notebooks and the pins."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO_ROOT / "kvutils", root / "kvutils", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "notebooks", root / "notebooks")
    for pin in jobs.PINS:
        shutil.copy(REPO_ROOT / pin, root / pin)
    return root


def _hashes(root, results, parameters=None) -> dict[str, str]:
    return {name: jobs.inputs_hash(job, "quick", (parameters or {}).get(name, {}), results, root=root)
            for name, job in jobs.JOBS.items()}


@pytest.mark.parametrize("change, rerun", [
    ("nothing", set()),
    ("notebook 03", {"03"}),
    ("a summary page's notebook", {"pages"}),
    ("a kvutils source", set(jobs.JOBS)),
    ("a schema", set(jobs.JOBS)),
    ("constraints.txt", set(jobs.JOBS)),
    ("a parameter of 02", {"02"}),
])
def test_what_a_change_reruns(repo, tmp_path, change, rerun):
    root = tmp_path / "repo"
    shutil.copytree(repo, root)
    before = _hashes(root, tmp_path)
    edits = {"notebook 03": root / "notebooks" / "03_sense_probes.ipynb",
             "a summary page's notebook": root / "notebooks" / "06_conclusions.ipynb",
             "a kvutils source": root / "kvutils" / "cache" / "methods" / "window.py",
             "a schema": root / "kvutils" / "core" / "schemas" / "bench.schema.json",
             "constraints.txt": root / "constraints.txt"}
    if change in edits:
        edits[change].write_bytes(edits[change].read_bytes() + b"\n")
    after = _hashes(root, tmp_path, {"02": {"batch_size": 2}} if change == "a parameter of 02" else None)
    assert {name for name in jobs.JOBS if before[name] != after[name]} == rerun


def test_a_job_reading_others_reruns_when_one_of_them_was_recomputed(repo, tmp_path):
    (tmp_path / jobs.RECORDS).mkdir()
    before = _hashes(repo, tmp_path)
    jobs.record_path(tmp_path, "04").write_text('{"inputs_hash": "' + "1" * 64 + '"}')
    after = _hashes(repo, tmp_path)
    assert {name for name in jobs.JOBS if before[name] != after[name]} == {"pages"}


def test_a_record_stands_only_with_its_hash_and_its_files(tmp_path):
    out = tmp_path / "a.json"
    out.write_text("{}")
    record = {"inputs_hash": "h", "outputs": {"a.json": jobs.file_digest(out)}}
    assert jobs.stale_reason(record, "h", [out]) is None
    assert "inputs changed" in jobs.stale_reason(record, "other", [out])
    assert "never built" in jobs.stale_reason(None, "h", [out])
    out.write_text('{"edited": 1}')
    assert "is not the file it wrote" in jobs.stale_reason(record, "h", [out])
    out.unlink()
    assert "is not the file it wrote" in jobs.stale_reason(record, "h", [out])


def test_every_job_of_the_makefile_is_declared_and_the_timed_ones_run_alone():
    makefile = (REPO_ROOT / "Makefile").read_text()
    for name in jobs.JOBS:
        assert f"job-{name}" in makefile, name
    assert {name for name, job in jobs.JOBS.items() if job.alone} == {"timing", "bench"}
    assert "$(CHAPTER_JOBS): job-timing" in makefile and "job-bench: $(CHAPTER_JOBS)" in makefile
