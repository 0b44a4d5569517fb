"""Running one job of `make book` (kvutils.book.jobs says what each job is and when it stands): a
study unit through `kvutils.studies.units.run_unit`, the benchmark, or the stale pages side by side."""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvutils.book import chapters
from kvutils.book.jobs import Job, chapter_parameters, check_job, job_hash, jobs_for, sources_digest
from kvutils.core import cores
from kvutils.core.jobrecords import new_record, now, read_record, stale_reason, write_record
from kvutils.core.results import machine_load
from kvutils.studies import units as study_units

SLOTS = "running"  # <results>/jobs/running/<job>.pid: the jobs running now (kvutils.core.cores)


def _folders(results_dir: str | Path, output_dir: str | Path | None) -> tuple[Path, Path]:
    results = Path(results_dir).expanduser().resolve()
    if output_dir:
        return results, Path(output_dir).expanduser().resolve()
    return results, chapters.pages_dir(results)


def run_job(name: str, profile: str, results_dir: str | Path, output_dir: str | Path | None, overrides: dict,
            threads: int) -> int:
    """Reuse the job or compute it; returns the exit status. A chapter's `overrides` must have passed
    `chapters.check_overrides` (`kvutils.build` checks them first, to refuse a wrong -p in one line)."""
    results, executed = _folders(results_dir, output_dir)
    if name == "pages":
        return run_pages(profile, results, executed, threads)
    job = check_job(name, profile)
    if job.kind == "page":
        return run_pages(profile, results, executed, threads, only=[name], overrides=overrides)
    load_before, began = (machine_load() if job.alone else None), now()
    with core_slot(results, name) as used:
        if job.kind == "study":
            checked = _checked(job.unit.chapter, profile, overrides, results)
            record = study_units.run_unit(job.unit, checked, results, profile=profile)
        else:
            record = _bench(job, profile, results, executed)
    if record.get("started", "") >= began:  # computed by this run: its threads and the machine's load
        record.update(threads=threads, threads_used=[threads, *used], load_before=load_before,
                      load_after=machine_load() if job.alone else None)
        write_record(results, name, record)
    return 0


def _checked(chapter: str, profile: str, overrides: dict, results: Path):
    return chapter_parameters(chapter, profile, overrides, chapters.results_dir_as_given(results))


def _bench(job: Job, profile: str, results: Path, executed: Path) -> dict:
    from kvutils.studies import bench_args, performance

    expected = job_hash(job, {}, profile, results)
    outputs = job.outputs(results, executed)
    record = read_record(results, job.name)
    why = stale_reason(record, expected, outputs)
    if why is None:
        print(f"== bench: reused, computed at commit {record['commit'][:12]} on {record['finished']}",
              flush=True)
        return record
    print(f"== bench: computing: {why}", flush=True)
    started, began = time.time(), now()
    argv = [*(["--model", "tiny-llama", "--repeats", "1", "--quick"] if profile == "quick" else []),
            "--results-dir", str(results)]
    code = performance.cli(argv, bench_args.parse(argv))
    if code:
        raise SystemExit(code)
    record = new_record("bench", "bench", expected, profile, {}, outputs, time.time() - started, began, 0)
    write_record(results, "bench", record)
    print(f"== bench: computed in {record['wall_s']:.0f} s", flush=True)
    return record


def stale_pages(profile: str, results: Path, executed: Path, only: list[str] | None = None) -> dict[str, str]:
    """{page job: why it must be rendered} for the pages whose record does not stand."""
    jobs, sources = jobs_for(profile), sources_digest()
    out = {}
    for name, job in jobs.items():
        if job.kind != "page" or (only and name not in only):
            continue
        why = stale_reason(read_record(results, name), job_hash(job, jobs, profile, results, sources=sources),
                           job.outputs(results, executed))
        if why:
            out[name] = why
    return out


def run_pages(profile: str, results: Path, executed: Path, threads: int, only: list[str] | None = None,
              overrides: dict | None = None) -> int:
    """Render every stale page, side by side (one per core the build lets this process use): a page
    reads its studies' results (their units are reused, never computed here, when make book ran them)."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = jobs_for(profile)
    stale = stale_pages(profile, results, executed, only)
    for name in [n for n, j in jobs.items()
                 if j.kind == "page" and (not only or n in only) and n not in stale]:
        print(f"== {name}: reused; its notebook, kvutils and the results it reads are unchanged", flush=True)

    def render(name: str) -> None:
        job = jobs[name]
        chapters.say(f"== {name}: rendering: {stale[name]}")
        started, began = time.time(), now()
        number = name.removeprefix("page-")
        chapters.run_chapter(number, profile, results, executed, overrides if only else None)
        # after: a page run by make chapter computed its study
        expected = job_hash(job, jobs, profile, results)
        write_record(results, name, new_record(name, "pages", expected, profile, {}, job.outputs(results,
                                                                                                 executed),
                                               time.time() - started, began, 0))

    workers = max(1, min(len(stale) or 1, threads, len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for done in [pool.submit(render, name) for name in stale]:
            done.result()  # a failed page raises here
    return 0


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


def missing_inputs(name: str, profile: str, results_dir: str | Path) -> list[str]:
    """The jobs `name` reads that have no record in `results_dir` yet ("pages": every page's)."""
    results = Path(results_dir).expanduser().resolve()
    jobs = jobs_for(profile)
    reads = {r for j in jobs.values() if j.kind == "page" for r in j.reads} if name == "pages" else \
        set(jobs[name].reads)
    return sorted(r for r in reads if read_record(results, r) is None)


def status(profile: str, results_dir: str | Path, output_dir: str | Path | None) -> int:
    """Print, per job, whether the next build reuses it or computes it, and why: a job that reads a
    job to compute is to compute too (the files it reads will change)."""
    results, executed = _folders(results_dir, output_dir)
    jobs, sources = jobs_for(profile), sources_digest()
    stale: dict[str, str] = {}
    for name, job in jobs.items():
        upstream = [r for r in job.reads if r in stale]
        if upstream:
            stale[name] = f"it reads {', '.join(upstream)}, to compute"
        else:
            why = stale_reason(read_record(results, name), job_hash(job, jobs, profile, results,
                                                                    sources=sources),
                               job.outputs(results, executed))
            if why:
                stale[name] = why
        resumes = ""
        if name in stale and job.kind == "study":
            expected = job_hash(job, jobs, profile, results, sources=sources)
            units = study_units.stored_units(study_units.checkpoint_folder(results, name, expected))
            resumes = f" (it resumes from the {units} unit(s) an interrupted run stored)" if units else ""
        print(f"{name:24s} {'to compute: ' + stale[name] if name in stale else 'reused'}{resumes}")
    return 0

