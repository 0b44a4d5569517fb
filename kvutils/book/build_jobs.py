"""Running one job of `make book` (kvutils.book.jobs says what a job is and when it stands): reuse
it when its record stands, else compute it and write its record after its results."""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvutils.book import chapters
from kvutils.book.jobs import (
    JOBS,
    RECORDS,
    Job,
    check_job,
    file_digest,
    inputs_hash,
    read_record,
    record_path,
    sources_digest,
    stale_reason,
)
from kvutils.core import checkpoints, cores
from kvutils.core.catalog import PAGES

SLOTS = "running"  # <results>/jobs/running/<job>.pid: the jobs running now (kvutils.core.cores)


def job_parameters(job: Job, profile: str, overrides: dict) -> dict:
    """The parameters a chapter job runs with: the profile's (the quick one's sizes, or the
    notebook's defaults) and the `-p` values given."""
    if job.kind != "chapter":
        return {}
    return {**(chapters.QUICK.get(job.notebook, {}) if profile == "quick" else {}), **overrides}


def _folders(results_dir: str | Path, output_dir: str | Path | None) -> tuple[Path, Path]:
    return Path(results_dir).expanduser().resolve(), Path(output_dir or chapters.EXECUTED_DIR).expanduser().resolve()


def run_job(name: str, profile: str, results_dir: str | Path, output_dir: str | Path | None, overrides: dict,
            threads: int) -> int:
    """Reuse the job or compute it; returns the exit status. A chapter's `overrides` must have passed
    `chapters.check_overrides` (`kvutils.build` checks them first, to refuse a wrong -p in one line)."""
    from kvutils.core.results import git_commit, machine_load, write_json_atomic

    job = check_job(name)
    results, executed = _folders(results_dir, output_dir)
    parameters = job_parameters(job, profile, overrides)
    expected = inputs_hash(job, profile, parameters, results)
    outputs = job.outputs(results, executed)
    record = read_record(results, name)
    why = stale_reason(record, expected, outputs)
    if why is None:
        print(f"== job {name}: reused, computed at commit {record['commit'][:12]} on {record['finished']} "
              f"({record['wall_s']:.0f} s, {_threads(record['threads'])}); its inputs are unchanged", flush=True)
        write_json_atomic(record_path(results, name), {**record, "status": "reused", "checked": _now()})
        return 0
    print(f"== job {name}: computing on {_threads(threads)}: {why}", flush=True)
    load_before = machine_load() if job.alone else None
    started, began = time.time(), _now()
    with core_slot(results, name) as used, job_checkpoints(results, name, expected) as units:
        resumed = stored_units(units)
        _execute(job, profile, results, executed, parameters, timed_alone=not overrides)
    wall = time.time() - started
    load_after = machine_load() if job.alone else None
    write_json_atomic(record_path(results, name), {
        "job": name, "kind": job.kind, "status": "computed", "inputs_hash": expected, "profile": profile,
        "parameters": parameters, "outputs": {p.name: file_digest(p) for p in outputs}, "wall_s": round(wall, 2),
        "threads": threads, "threads_used": [threads, *used], "load_before": load_before, "load_after": load_after,
        "resumed_units": resumed,
        "commit": git_commit(),
        "started": began, "finished": _now(), "checked": _now()})
    shutil.rmtree(checkpoint_folder(results, name, expected), ignore_errors=True)  # the record stands: no unit is needed
    print(f"== job {name}: computed in {wall:.0f} s", flush=True)
    return 0


CHECKPOINTS = "checkpoints"  # <results>/jobs/checkpoints/<job>-<inputs hash>/: a running job's finished units


def checkpoint_folder(results: Path, name: str, inputs: str) -> Path:
    return results / RECORDS / CHECKPOINTS / f"{name}-{inputs[:16]}"


def stored_units(folder: Path) -> int:
    """The finished units in a job's checkpoint folder (a unit being written is a hidden folder)."""
    return sum(1 for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else 0


@contextmanager
def job_checkpoints(results: Path, name: str, inputs: str) -> Iterator[Path]:
    """The job's checkpoint folder (`kvutils.core.checkpoints`), named by its inputs hash, for the
    length of the block: its units survive an interruption, and the next run of the same inputs
    reads them back. Another inputs hash's folder of the job is stale and removed."""
    folder = checkpoint_folder(results, name, inputs)
    for other in folder.parent.glob(f"{name}-*"):
        if other != folder:
            shutil.rmtree(other, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    if stored := stored_units(folder):
        print(f"== job {name}: resuming from the {stored} unit(s) an interrupted run stored ({folder})", flush=True)
    os.environ[checkpoints.ENV] = str(folder)
    try:
        yield folder
    finally:
        os.environ.pop(checkpoints.ENV, None)


@contextmanager
def core_slot(results: Path, name: str) -> Iterator[list[int]]:
    """The job's slot among the build's running jobs for the length of the block (see
    `kvutils.core.cores`: a job's long loops take the cores other jobs have freed); yields the list
    the thread counts it changed to are put in when the block ends."""
    folder = results / "jobs" / SLOTS
    folder.mkdir(parents=True, exist_ok=True)
    slot, changes = folder / f"{name}.pid", folder / f"{name}.threads"
    changes.unlink(missing_ok=True)
    slot.write_text(str(os.getpid()), encoding="utf-8")
    os.environ.update({cores.SLOTS_ENV: str(folder), cores.JOB_ENV: name,
                       cores.CORES_ENV: os.environ.get(cores.CORES_ENV) or str(os.cpu_count() or 1)})
    used: list[int] = []
    try:
        yield used
    finally:
        used += cores.threads_used(folder, name)
        slot.unlink(missing_ok=True)
        changes.unlink(missing_ok=True)
        for variable in (cores.SLOTS_ENV, cores.JOB_ENV):
            os.environ.pop(variable, None)


def missing_inputs(name: str, results_dir: str | Path) -> list[str]:
    """The jobs `name` reads that have no record in `results_dir` yet."""
    results = Path(results_dir).expanduser().resolve()
    return [read for read in check_job(name).reads if read_record(results, read) is None]


def _threads(n: int) -> str:
    return f"{n} thread{'s' * (n != 1)}"


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def _execute(job: Job, profile: str, results: Path, executed: Path, parameters: dict, timed_alone: bool) -> None:
    import os

    from kvutils.studies.cache_approximations import study as approx_study
    from kvutils.studies.parameters import Chapter4Parameters

    given = chapters.QUICK[Chapter4Parameters.NOTEBOOK] if profile == "quick" else {}
    if job.kind == "timing":
        approx_study.time_alone(results, Chapter4Parameters(**given))
    elif job.kind == "retrieval":
        approx_study.retrieval_alone(results, Chapter4Parameters(**given))
    elif job.kind == "chapter":
        # chapter 4 at the profile's settings (no -p) reads what the timing and retrieval jobs wrote
        for name, variable in ((approx_study.DECODE_TIMING_FILE, approx_study.TIMINGS_ENV),
                               (approx_study.RETRIEVAL_FILE, approx_study.RETRIEVAL_ENV)):
            if job.name == "04" and timed_alone and (results / name).is_file():
                os.environ[variable] = str(results / name)
        chapters.run_chapter(job.name, profile, results, executed, parameters)
    elif job.kind == "bench":
        from kvutils.studies import bench_args, performance

        argv = [*(["--model", "tiny-llama", "--repeats", "1", "--quick"] if profile == "quick" else []),
                "--results-dir", str(results)]
        code = performance.cli(argv, bench_args.parse(argv))
        if code:
            raise SystemExit(code)
    else:  # the summary pages read results only: side by side, one per core the build lets this process use
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(len(PAGES), len(os.sched_getaffinity(0))))) as pool:
            for done in [pool.submit(chapters.run_chapter, page, profile, results, executed) for page in PAGES]:
                done.result()  # a failed page raises here, as it did run alone


def status(profile: str, results_dir: str | Path, output_dir: str | Path | None) -> int:
    """Print, per job, whether the next build reuses it or computes it, and why."""
    results, executed = _folders(results_dir, output_dir)
    sources = sources_digest()
    for name, job in JOBS.items():
        expected = inputs_hash(job, profile, job_parameters(job, profile, {}), results, sources=sources)
        why = stale_reason(read_record(results, name), expected, job.outputs(results, executed))
        folder = checkpoint_folder(results, name, expected)
        units = stored_units(folder)
        resumes = f" (it resumes from the {units} unit(s) an interrupted run stored)" if why and units else ""
        print(f"{name:8s} {'reused' if why is None else 'to compute: ' + why}{resumes}")
    return 0
