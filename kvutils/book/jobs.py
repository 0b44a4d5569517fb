"""`make book`'s jobs: what each one computes, from which inputs, and whether its last result still
stands. GNU make is the engine (the Makefile's `jobs` targets: their order, `-j`, resuming); each
of its recipes is one `python -m kvutils.build JOB`, which runs the job only when its inputs changed.

A job's inputs are hashed into one sha256 (`inputs_hash`): its notebook, its parameters (profile
and `-p` values), every source file of kvutils (its schemas and scripts included), the pins
(`constraints.txt`, `pyproject.toml`: the embedded models' packages are pinned there, and their
weights by sha256 in kvutils/models/registry.py) and, for a job that reads others' results, their
records' hashes. A finished job writes `<results>/jobs/<job>.json` (its record: the hash, the sha256
of each file it wrote, its wall time, threads, the machine's load before and after, the commit), and
only after its results: an interrupted job leaves no record, so the next build runs it again. A job
whose record's hash equals the inputs' hash and whose files still hold what the record says is
reused, never rerun; anything else is computed.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kvutils.core.catalog import NOTEBOOKS, PAGES
from kvutils.core.paths import REPO_ROOT

RECORDS = "jobs"  # <results>/jobs/<job>.json
PINS = ("constraints.txt", "pyproject.toml")
SOURCES = ("*.py", "*.json", "*.js")  # kvutils' files that decide what a job computes


@dataclass(frozen=True)
class Job:
    """One job of the build. `kind`: "chapter" (a notebook that computes), "timing" (chapter 4's
    decode steps, alone), "retrieval" (chapter 4's long-range retrieval test, beside the chapters:
    the longest part of chapter 4, its own job so that the cores share it), "bench" (the benchmark,
    alone) or "pages" (the summary pages)."""

    name: str
    kind: str
    notebook: str = ""  # the chapter's notebook name (chapter jobs)
    reads: tuple[str, ...] = ()  # the jobs whose results this one reads
    alone: bool = False  # timed: make runs it with nothing else of the build beside it

    def outputs(self, results_dir: Path, executed_dir: Path) -> list[Path]:
        """The files the job writes (each record holds their sha256)."""
        if self.kind == "chapter":
            return [results_dir / f"{self.notebook}.json", executed_dir / f"{self.notebook}.ipynb"]
        if self.kind == "timing":
            return [results_dir / "04_decode_timing.json"]
        if self.kind == "retrieval":
            return [results_dir / "04_retrieval.json"]
        if self.kind == "bench":
            return [results_dir / "bench.json"]
        return [executed_dir / f"{name}.ipynb" for name in PAGES.values()]


CHAPTERS = tuple(Job(number, "chapter", name, reads=("timing", "retrieval") if number == "04" else ())
                 for number, name in NOTEBOOKS.items())
JOBS: dict[str, Job] = {j.name: j for j in (
    Job("timing", "timing", alone=True),
    Job("retrieval", "retrieval"),
    *CHAPTERS,
    Job("bench", "bench", alone=True),  # after the chapters, for the machine's sake: it reads none of their results
    Job("pages", "pages", reads=("timing", "retrieval", *NOTEBOOKS, "bench")),  # appendix B reads every job's record
)}


def check_job(name: str) -> Job:
    if name not in JOBS:
        raise ValueError(f"job: {name!r} unknown; choose one of {', '.join(JOBS)}")
    return JOBS[name]


def _files(root: Path, patterns: Iterable[str]) -> list[Path]:
    return sorted({p for pattern in patterns for p in (root / "kvutils").rglob(pattern) if "__pycache__" not in p.parts})


def sources_digest(root: Path = REPO_ROOT) -> str:
    """One sha256 over kvutils' source files (their paths and bytes) and the pins."""
    h = hashlib.sha256()
    for path in [*_files(root, SOURCES), *(root / pin for pin in PINS)]:
        h.update(str(path.relative_to(root)).encode() + b"\0")
        h.update(path.read_bytes() if path.is_file() else b"(missing)")
        h.update(b"\0")
    return h.hexdigest()


def inputs_hash(job: Job, profile: str, parameters: dict, results_dir: Path, root: Path = REPO_ROOT,
                sources: str | None = None) -> str:
    """The sha256 of everything the job's result depends on (see the module's text). A job that
    reads others' results hashes their records' hashes: it reruns whenever one of them was
    recomputed. `sources`: `sources_digest(root)`, when the caller has it already."""
    h = hashlib.sha256()
    h.update(json.dumps({"job": job.name, "profile": profile, "parameters": parameters}, sort_keys=True,
                        default=str).encode())
    h.update((sources or sources_digest(root)).encode())
    notebooks = [job.notebook] if job.kind == "chapter" else list(PAGES.values()) if job.kind == "pages" else []
    for name in notebooks:
        h.update((root / "notebooks" / f"{name}.ipynb").read_bytes())
    for upstream in job.reads:
        record = read_record(results_dir, upstream)
        h.update((record or {}).get("inputs_hash", "(not built)").encode())
    return h.hexdigest()


def record_path(results_dir: Path, job: str) -> Path:
    return Path(results_dir) / RECORDS / f"{job}.json"


def read_record(results_dir: Path, job: str) -> dict | None:
    """The job's last record, or None where there is none or it cannot be read (then it reruns)."""
    try:
        return json.loads(record_path(results_dir, job).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def file_digest(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def stale_reason(record: dict | None, expected_hash: str, outputs: list[Path]) -> str | None:
    """Why a job must run (None: its record stands and every output still holds what it wrote)."""
    if record is None:
        return "never built here, or interrupted before it finished"
    if record.get("inputs_hash") != expected_hash:
        return "its inputs changed (notebook, parameters, kvutils' sources, the pins, or a job it reads)"
    for path in outputs:
        if record.get("outputs", {}).get(path.name) != file_digest(path):
            return f"{path} is not the file it wrote (missing or changed since)"
    return None
