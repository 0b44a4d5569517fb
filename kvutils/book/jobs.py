"""`make book`'s jobs: the study units (kvutils.studies.units), the benchmark, and the pages.

    timing              chapter 4's decode steps, alone on every core, first
    retrieval-<model>   chapter 4's retrieval test, one job per model
    costs               chapter 4's Table 2, frontier and bytes
    01 02 03 05         the chapters' studies
    04                  chapter 4's results, related from timing, retrieval and costs (seconds)
    page-01 … page-05   a chapter's page, from its study's results, as soon as that study is done
                        (in a slot the studies no longer need)
    bench               the benchmark, alone on every core, after the studies and their pages
    pages               every page still stale: the summary pages (they read the benchmark too);
                        side by side, one per core

A study job is reused while its unit's inputs hash stands (`kvutils.studies.units`: its parameters,
its import closure, its data, the pins, the files it reads). A page's inputs are its notebook, every
kvutils source (the report layer renders it), data/, the pins and the sha256 of every results file it reads:
a change confined to the report layer, a notebook's prose or the book re-renders pages and computes
nothing. GNU make (the Makefile) runs the jobs, longest first (`order`: from the wall times the
records measured, else the estimates below), on every core.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from kvutils.core.catalog import NOTEBOOKS, PAGES
from kvutils.core.closure import closure, digest_files
from kvutils.core.jobrecords import RECORDS, file_digest, read_record, record_path, stale_reason
from kvutils.core.paths import REPO_ROOT
from kvutils.studies import units as study_units

PINS = study_units.PINS
SOURCES = ("*.py", "*.json", "*.js")  # kvutils' files a page's rendering may read
# seconds each job took in the last full build (tests/data/full_build/jobs, at 5820125, fresh clone, alone;
# chapter 5 took 2,588 s at 9bafce1 with k = 8 and 48 patching pairs more), for the order of a build with no
# records of its own: the longest starts first
ESTIMATED_S = {"05": 1756, "costs": 1316, "retrieval-gemma3-270m": 1255, "retrieval-smollm2-135m": 1015,
               "01": 466, "02": 29, "03": 26}


@dataclass(frozen=True)
class Job:
    """One job of the build. `kind`: "study" (a unit), "bench" or "page". `reads`: the jobs whose
    files it reads (a stale one makes it stale too: `status`)."""

    name: str
    kind: str
    unit: study_units.Unit | None = None
    page: str = ""  # a page's notebook name
    reads: tuple[str, ...] = ()
    alone: bool = False  # timed: make runs it with nothing else of the build beside it

    def outputs(self, results_dir: Path, executed_dir: Path) -> list[Path]:
        if self.kind == "study":
            return [Path(results_dir) / name for name in self.unit.outputs]
        if self.kind == "bench":
            return [Path(results_dir) / "bench.json"]
        return [Path(executed_dir) / f"{self.page}.ipynb"]


def chapter_parameters(chapter: str, profile: str, overrides: dict | None = None,
                       results_dir: str = "results"):
    """A chapter's checked declaration at the profile's values (the quick one's sizes, or the
    notebook's defaults) and `overrides`."""
    from kvutils.book.chapters import QUICK
    from kvutils.studies.parameters import DECLARED

    name = NOTEBOOKS[chapter]
    given = {**(QUICK.get(name, {}) if profile == "quick" else {}), **(overrides or {})}
    return DECLARED[name](**{**given, "results_dir": results_dir})


def jobs_for(profile: str) -> dict[str, Job]:
    """Every job of the build at `profile`, in the order make lists them."""
    ch4 = study_units.units_of("04", chapter_parameters("04", profile))
    units = [*ch4[:-1], *(study_units.CHAPTER_UNITS[n] for n in ("01", "02", "03", "05")), ch4[-1]]
    out = {unit.name: Job(unit.name, "study", unit, alone=unit.name == "timing",
                          reads=tuple(u.name for u in ch4[:-1]) if unit.name == "04" else ())
           for unit in units}
    out["bench"] = Job("bench", "bench", alone=True)
    for number, name in NOTEBOOKS.items():
        reads = tuple(u.name for u in ch4) if number == "04" else (number,)
        out[f"page-{number}"] = Job(f"page-{number}", "page", page=name, reads=reads)
    for number, name in PAGES.items():
        out[f"page-{number}"] = Job(f"page-{number}", "page", page=name, reads=(*(u.name for u in units),
                                                                                "bench"))
    return out


def check_job(name: str, profile: str) -> Job:
    jobs = jobs_for(profile)
    if name not in jobs and name != "pages":
        raise ValueError(f"job: {name!r} unknown; choose one of {', '.join([*jobs, 'pages'])}")
    return jobs.get(name)


# --------------------------------------------------------------------------- inputs


def sources_digest(root: Path = REPO_ROOT) -> str:
    """One sha256 over kvutils' source files, data/ (chapter 3's explorer reads the senses file on its
    page) and the pins: their paths and bytes."""
    files = sorted({p for pattern in SOURCES for p in (root / "kvutils").rglob(pattern)
                    if "__pycache__" not in p.parts})
    data = sorted(p for p in (root / "data").rglob("*") if p.is_file())
    return digest_files([*files, *data, *(root / pin for pin in PINS)], root)


def bench_hash(profile: str, root: Path = REPO_ROOT) -> str:
    """The benchmark's inputs: its profile, its import closure and the pins."""
    sources, data = closure(["kvutils.studies.performance"], root)
    h = hashlib.sha256(json.dumps({"job": "bench", "profile": profile}).encode())
    for part in (sources, [root / d for d in data], [root / pin for pin in PINS]):
        h.update(digest_files(part, root).encode())
    return h.hexdigest()


def read_files(job: Job, jobs: dict[str, Job], results_dir: Path) -> list[Path]:
    """The results files a page reads: its upstream jobs' outputs (and, for a summary page, every
    study's and the benchmark's record: appendix B reads them)."""
    files = [path for name in job.reads for path in jobs[name].outputs(results_dir, results_dir)]
    if job.page in PAGES.values():
        files += [record_path(results_dir, name) for name in job.reads]
    return files


def page_hash(job: Job, jobs: dict[str, Job], profile: str, results_dir: Path, sources: str,
              root: Path = REPO_ROOT) -> str:
    h = hashlib.sha256(json.dumps({"job": job.name, "profile": profile}).encode())
    h.update(sources.encode())
    h.update((root / "notebooks" / f"{job.page}.ipynb").read_bytes())
    for path in read_files(job, jobs, results_dir):
        h.update(f"{path.name}:{file_digest(path)}".encode())
    return h.hexdigest()


def job_hash(job: Job, jobs: dict[str, Job], profile: str, results_dir: Path, overrides: dict | None = None,
             sources: str | None = None) -> str:
    if job.kind == "study":
        checked = chapter_parameters(job.unit.chapter, profile, overrides)
        return study_units.inputs_hash(job.unit, checked, results_dir)
    if job.kind == "bench":
        return bench_hash(profile)
    return page_hash(job, jobs, profile, results_dir, sources or sources_digest())


def order(profile: str, results_dir: Path) -> list[str]:
    """The jobs that run side by side (the studies but timing and 04), longest first: each one's wall
    time on record here (times its threads: a job that took both cores of a finished slot counts
    its core-seconds), else the estimate of the last full build."""
    jobs = jobs_for(profile)
    names = [n for n, j in jobs.items() if j.kind == "study" and n not in ("timing", "04")]

    def seconds(name: str) -> float:
        record = read_record(results_dir, name)
        if record and isinstance(record.get("wall_s"), (int, float)):
            return record["wall_s"]
        return ESTIMATED_S.get(name, 0.0)

    return sorted(names, key=seconds, reverse=True)


def main(argv: list[str] | None = None) -> int:
    """`python -m kvutils.book.jobs order --profile P --results-dir R`: the side-by-side jobs, longest
    first, one line (the Makefile's list); `retrieval --profile P`: chapter 4's retrieval jobs;
    `chapter-pages`: the chapters' pages, each rendered once its study is done (the summary pages
    wait for the benchmark)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kvutils.book.jobs")
    parser.add_argument("what", choices=["order", "retrieval", "chapter-pages"])
    parser.add_argument("--profile", default="full", choices=["full", "quick"])
    parser.add_argument("--results-dir", default="results")
    args = parser.parse_args(argv)
    if args.what == "order":
        print(" ".join(order(args.profile, Path(args.results_dir))))
    elif args.what == "retrieval":
        print(" ".join(n for n in jobs_for(args.profile) if n.startswith(study_units.RETRIEVAL)))
    else:
        print(" ".join(f"page-{number}" for number in NOTEBOOKS))
    return 0


__all__ = ["RECORDS", "Job", "file_digest", "jobs_for", "read_record", "record_path", "stale_reason"]

if __name__ == "__main__":
    sys.exit(main())
