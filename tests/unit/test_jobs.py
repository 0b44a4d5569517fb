"""make book's jobs (kvutils.book.jobs, kvutils.studies.units): a study's inputs hash covers what it
computes (its parameters, the import closure of its code, its data, the pins, the results it reads)
and nothing else, so a page-only change recomputes no study; a page's covers its notebook, kvutils and
the results it reads."""
import json
import shutil

import pytest

from kvutils.book import build_jobs, jobs
from kvutils.core import jobrecords
from kvutils.core.closure import closure
from kvutils.core.paths import REPO_ROOT
from kvutils.studies import units


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """What the hashes read, copied: kvutils' sources, the notebooks, data/ and the pins."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(REPO_ROOT / "kvutils", root / "kvutils", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO_ROOT / "notebooks", root / "notebooks")
    shutil.copytree(REPO_ROOT / "data", root / "data")
    for pin in jobs.PINS:
        shutil.copy(REPO_ROOT / pin, root / pin)
    return root


def _study_hashes(root, results, overrides=None) -> dict[str, str]:
    out = {}
    for name, job in jobs.jobs_for("quick").items():
        if job.kind == "study":
            given = (overrides or {}).get(name, {})
            checked = jobs.chapter_parameters(job.unit.chapter, "quick", given)
            out[name] = units.inputs_hash(job.unit, checked, results, root=root)
    return out


def _page_hashes(root, results) -> dict[str, str]:
    every = jobs.jobs_for("quick")
    sources = jobs.sources_digest(root)
    return {name: jobs.page_hash(job, every, "quick", results, sources, root=root)
            for name, job in every.items() if job.kind == "page"}


CH4 = {"costs", "retrieval-tiny-llama", "04"}  # not the decode timing: its unit imports no cache method
EDITS = {
    "nothing": (None, set()),
    "a comment in the report layer": ("kvutils/report/names.py", set()),
    "a notebook's prose": ("notebooks/03_sense_probes.ipynb", set()),
    "chapter 5's declaration": ("kvutils/studies/parameters/chapter5.py", {"05"}),
    "a summary page's notebook": ("notebooks/06_conclusions.ipynb", set()),
    "one cache method": ("kvutils/cache/methods/knorm.py", CH4),
    "the follow-up questions": ("kvutils/studies/cache_approximations/followups.py", {"retrieval-tiny-llama", "04"}),
    "Table 2's unit": ("kvutils/studies/cache_approximations/table2.py", {"costs", "04"}),
    "the timing unit": ("kvutils/studies/cache_approximations/timing.py", {"timing", "04"}),
    "a module chapter 1 imports, deep down": ("kvutils/models/greedy.py", None),  # checked below
    "the senses file": ("data/senses.json", None),
    "constraints.txt": ("constraints.txt", "all"),
}


@pytest.mark.parametrize("change", list(EDITS))
def test_what_a_change_recomputes(repo, tmp_path, change):
    root = tmp_path / "repo"
    shutil.copytree(repo, root)
    before, pages_before = _study_hashes(root, tmp_path), _page_hashes(root, tmp_path)
    path, expected = EDITS[change]
    if path:
        edited = root / path
        if path.endswith(".json"):  # one continuation reworded: still valid JSON
            edited.write_text(edited.read_text().replace("The ", "The  ", 1))
        elif path.endswith(".ipynb"):
            nb = json.loads(edited.read_text())
            markdown = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
            markdown["source"] = ["A reworded sentence.\n", *markdown["source"]]
            edited.write_text(json.dumps(nb, indent=1))
        else:
            edited.write_bytes(edited.read_bytes() + b"\n# a comment\n")
    after, pages_after = _study_hashes(root, tmp_path), _page_hashes(root, tmp_path)
    changed = {name for name in before if before[name] != after[name]}
    if expected == "all":
        assert changed == set(before)
    elif change == "a module chapter 1 imports, deep down":
        assert "01" in changed and not {"02", "03"} & changed  # causal decoding, not the sense studies
    elif change == "the senses file":
        assert {"01", "02", "03"} <= changed  # the fault a held-out sweep found: data/ was not an input
    else:
        assert changed == expected
    if change != "nothing":  # a page reads kvutils whole and its notebook: it re-renders
        assert pages_before != pages_after


def test_the_closure_is_read_from_the_code_imports_inside_functions_included(repo):
    files, data = closure(["kvutils.studies.cache_exactness"], repo)
    names = {p.relative_to(repo).as_posix() for p in files}
    assert "kvutils/studies/cache_exactness.py" in names and "kvutils/models/greedy.py" in names
    assert "kvutils/models/loading.py" in names  # imported at the top and again inside run()
    assert not any(n.startswith(("kvutils/report/", "kvutils/book/")) for n in names)
    assert "data/senses.json" in data
    # a module imported only inside a function of the closure joins it
    target = repo / "kvutils" / "studies" / "cache_exactness.py"
    original = target.read_text()
    try:
        target.write_text(original + "\n\ndef later():\n    from kvutils.report import names  # noqa\n")
        files, _ = closure(["kvutils.studies.cache_exactness"], repo)
        assert repo / "kvutils" / "report" / "names.py" in files
    finally:
        target.write_text(original)


def test_a_job_reading_another_hashes_the_file_it_reads(repo, tmp_path):
    """The fault a sweep found: after the timing was recomputed (same inputs, other numbers), chapter 4
    stayed reused. Now chapter 4's results and page read the timing file's sha256."""
    (tmp_path / "04_decode_timing.json").write_text('{"decode": {"m": 76.70}}')
    every = jobs.jobs_for("quick")
    relate = every["04"].unit
    checked = jobs.chapter_parameters("04", "quick")
    before = units.inputs_hash(relate, checked, tmp_path, root=repo), _page_hashes(repo, tmp_path)["page-04"]
    (tmp_path / "04_decode_timing.json").write_text('{"decode": {"m": 67.64}}')
    after = units.inputs_hash(relate, checked, tmp_path, root=repo), _page_hashes(repo, tmp_path)["page-04"]
    assert before[0] != after[0] and before[1] != after[1]


def test_a_record_stands_only_with_its_hash_and_its_files(tmp_path):
    out = tmp_path / "a.json"
    out.write_text("{}")
    record = {"inputs_hash": "h", "outputs": {"a.json": jobrecords.file_digest(out)}}
    assert jobrecords.stale_reason(record, "h", [out]) is None
    assert "inputs changed" in jobrecords.stale_reason(record, "other", [out])
    assert "never built" in jobrecords.stale_reason(None, "h", [out])
    out.write_text('{"edited": 1}')
    assert "is not the file it wrote" in jobrecords.stale_reason(record, "h", [out])
    out.unlink()
    assert "is not the file it wrote" in jobrecords.stale_reason(record, "h", [out])


def test_status_says_what_make_book_would_do_a_stale_study_makes_its_readers_stale(tmp_path, capsys, monkeypatch):
    """The fault a sweep found: after make chapter N=05 -p ..., make status said the pages were reused,
    and the next make book rendered them. A job that reads a job to compute is to compute."""
    every = jobs.jobs_for("quick")
    for name, job in every.items():  # every job's record stands ...
        monkeypatch.setattr(build_jobs, "job_hash", lambda job, *a, **k: "h" * 64)
        outputs = job.outputs(tmp_path, tmp_path)
        for path in outputs:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(name)
        jobrecords.write_record(tmp_path, name, {"inputs_hash": "h" * 64, "outputs": {
            p.name: jobrecords.file_digest(p) for p in outputs}})
    build_jobs.status("quick", tmp_path, tmp_path)
    assert "to compute" not in capsys.readouterr().out
    (tmp_path / "05_qwen3_switch.json").write_text("other parameters")  # ... until chapter 5 is rerun by hand
    build_jobs.status("quick", tmp_path, tmp_path)
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    stale = {name for name, text in lines.items() if text.startswith("to compute")}
    assert stale == {"05", "page-05", "page-06", "page-A", "page-B"}, lines


def test_every_chapter_has_its_jobs_and_the_timed_ones_run_alone():
    every = jobs.jobs_for("full")
    assert {n for n, j in every.items() if j.alone} == {"timing", "bench"}
    assert {"retrieval-gemma3-270m", "retrieval-smollm2-135m", "costs", "01", "02", "03", "04", "05"} <= set(every)
    order = jobs.order("full", REPO_ROOT / "no-records-here")
    assert order == sorted(order, key=lambda n: jobs.ESTIMATED_S.get(n, 0.0), reverse=True)  # longest first
    assert set(order) == {n for n, j in every.items() if j.kind == "study"} - {"timing", "04"}
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "job-%: job-timing" in makefile
    bench = "job-bench: $$(addprefix job-,$$(STUDY_JOBS)) job-04 $$(addprefix job-,$$(CHAPTER_PAGES))"
    assert bench in makefile
    assert "job-page-%: job-$$*" in makefile
    assert "01|02|03|04|05" not in makefile  # the chapters come from kvutils/core/catalog.py
