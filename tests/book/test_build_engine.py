"""make book's engine (kvutils.book.jobs, kvutils.studies.units, GNU make): a job is reused when nothing
it depends on changed, computed when something did, and an interrupted build resumes with the jobs it
had not finished; one core builds with one job at a time; a change to the report layer re-renders the
pages and computes no study."""
import json
import re
import shutil
import subprocess

import psutil
import pytest
from test_interrupts import Watched

from kvutils.book.jobs import jobs_for, record_path
from kvutils.core.paths import REPO_ROOT


def _make(*targets: str, results, executed, prefix: tuple[str, ...] = (), timeout: int = 900, cwd=REPO_ROOT) -> str:
    done = subprocess.run([*prefix, "make", "--no-print-directory", *targets, "PROFILE=quick", f"RESULTS={results}",
                           f"EXECUTED={executed}"], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


def test_a_build_with_nothing_changed_reuses_every_job_on_one_core(quick_chapters, tmp_path):
    """`taskset -c 0 make build-jobs` over the quick book's results, in the clone that built them:
    one job at a time, on one core, and every job reused (the log names the commit each was computed
    at); no file changes."""
    root, _ = quick_chapters
    results, executed = tmp_path / "results", tmp_path / "chapters"
    shutil.copytree(root / "results", results)
    shutil.copytree(root / "book" / "chapters", executed)
    before = {p: p.read_bytes() for p in [*results.rglob("*.json"), *executed.glob("*.ipynb")] if "jobs" not in p.parts}
    if shutil.which("taskset") is None:
        pytest.skip("taskset (util-linux) is not installed")
    log = _make("build-jobs", results=results, executed=executed, prefix=("taskset", "-c", "0"), cwd=root / "clone")
    assert "1 job(s) side by side, 1 torch thread(s) each, on 1 core(s)" in log
    for name, job in jobs_for("quick").items():
        said = f"== {name}: reused; " if job.kind == "page" else f"== {name}: reused, computed at commit "
        assert said in log, log
    assert "computing" not in log and "rendering" not in log
    assert {p: p.read_bytes() for p in before} == before


def _untimed(numbers) -> str:
    """A results file's numbers without what a clock measured, as text (a NaN equals a NaN there)."""
    def drop(value):
        if isinstance(value, dict):
            return {k: drop(v) for k, v in value.items() if not any(t in k for t in ("seconds", "time", "_s", "cost"))}
        return [drop(v) for v in value] if isinstance(value, list) else value
    return json.dumps(drop(numbers), sort_keys=True)


def _status(results) -> dict:
    return json.loads(record_path(results, "05").read_text())


@pytest.mark.slow  # chapter 5's quick job twice and a half and the decode timing once
def test_an_interrupted_build_resumes_and_a_parameter_reruns_its_chapter_whole(tmp_path):
    """make's job-05 (the decode timing, then chapter 5 on the quick profile): interrupted while
    chapter 5 trains, it leaves the timing's record and no record of chapter 5; run again, it reuses
    the timing and computes chapter 5. A -p on chapter 5 (one that moves only its timings) computes
    it anew and whole, with the resumed run's numbers; make then reads the chapter as changed again."""
    results, executed = tmp_path / "results", tmp_path / "chapters"
    run = Watched(["make", "--no-print-directory", "job-05", "PROFILE=quick", f"RESULTS={results}",
                   f"EXECUTED={executed}"], module=False)
    run.wait_for("train tail", timeout=300)  # the timing job is done, chapter 5's kernel trains
    kernels = [p for p in run.descendants() if "ipykernel" in " ".join(p.cmdline())]
    timing = record_path(results, "timing").read_text()
    code = run.stop("SIGINT")  # as a terminal's Ctrl-C: to make and every job of its process group
    assert code != 0 and "interrupted; this job left no record" in "".join(run.err), run.text()[-3000:]
    assert "Traceback" not in "".join(run.err)
    assert not psutil.wait_procs(kernels, timeout=30)[1]
    assert not record_path(results, "05").exists() and record_path(results, "timing").read_text() == timing
    (units,) = (results / "jobs" / "checkpoints").glob("05-*")  # the base pass it had finished, stored
    assert any(units.iterdir())
    status = _make("status", results=results, executed=executed)
    assert re.search(r"^05 +to compute: never built here.* \(it resumes from the \d+ unit\(s\) an interrupted run stored\)$",
                     status, re.M), status
    log = _make("job-05", results=results, executed=executed)
    assert "== timing: reused" in log and "== 05: computing: never built here" in log
    assert "== 05: resuming from the " in log and " unit(s) an interrupted run stored" in log
    assert _status(results)["resumed_units"] >= 2  # the base pass and the zero-shot accuracy at least
    assert not units.exists()  # the record stands: its units are gone
    resumed = json.loads((results / "05_qwen3_switch.json").read_text())["numbers"]
    first = _status(results)
    assert first["status"] == "computed" and first["parameters"]["steps"] == 3
    # computed whole this time, timed twice over (the same numbers as the resumed run's, timings aside)
    rerun = subprocess.run([".venv/bin/python", "-m", "kvutils.build", "05", "--profile", "quick", "--results-dir",
                            str(results), "--output-dir", str(executed), "-p", "timing_repeats", "2"], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0 and "== 05: computing" in rerun.stdout and "its inputs changed" in rerun.stdout
    assert "resuming" not in rerun.stdout and _status(results)["parameters"]["timing_repeats"] == 2
    assert _untimed(json.loads((results / "05_qwen3_switch.json").read_text())["numbers"]) == _untimed(resumed)
    # the next build, without the -p, computes the chapter at its defaults again; the timing stays reused
    status = _make("status", results=results, executed=executed)
    assert re.search(r"^05 +to compute: its inputs changed", status, re.M) and re.search(r"^timing +reused$", status, re.M)
