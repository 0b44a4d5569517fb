"""The book's computations, apart from its pages: each study unit computes some results files from
a chapter's checked parameters, and is reused whenever its own inputs are unchanged.

    unit        computes                                     from chapter
    01 02 03 05 the chapter's results file                    its own
    timing      04_decode_timing.json (decode steps, alone)   04
    retrieval-M 04_retrieval.M.json (one model's retrieval)   04
    costs       04_costs.json (Table 2, the frontier, bytes)  04
    04          04_retrieval.json and 04_cache_approximations.json, relating the three above (seconds)

A unit's inputs hash (`inputs_hash`) covers what it computes, and nothing else:
- the parameters it reads (`Unit.parameters`: all of its chapter's but results_dir, or a named subset);
- its code: the import closure of its module inside kvutils (kvutils.core.closure), found from the
  code; the report layer, the notebooks' prose and the book's pages are never in it;
- the data files that code names ("data/...") and the files and folders its parameters name (a
  corpus folder, a senses file, a local model's folder), by their bytes (a large file by size and time);
- the pins (constraints.txt, overrides.txt, pyproject.toml: the embedded models' packages, whose
  weights are checked by sha256 in kvutils/models/registry.py, itself in every closure that loads a
  model);
- the sha256 of each results file it reads (`Unit.reads`).

`run_unit` reuses a unit whose record (<results>/jobs/<unit>.json, kvutils.core.jobrecords) holds
that hash and whose files still hold what it wrote; anything else is computed, under a lock taken
before anything is touched, with its checkpoints in a folder named by the hash. make book runs
each unit as a job (kvutils.book.jobs); a chapter's notebook runs the same units (`chapter_results`),
so a notebook run by papermill computes what is missing and reads what exists for exactly its inputs.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvutils.core import jobrecords, results
from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.closure import closure, digest_files
from kvutils.core.paths import REPO_ROOT

PINS = ("constraints.txt", "overrides.txt", "pyproject.toml")
LARGE = 16 << 20  # a file past 16 MiB (a model's weights) is hashed by its size and time, not its bytes
RETRIEVAL = "retrieval-"  # retrieval-<model>: one retrieval model's unit


@dataclass(frozen=True)
class Unit:
    """One computation. `compute` ("module:function") takes (the chapter's checked parameters, the
    results folder, this unit) and writes `outputs` there; the module's import closure is its code."""

    name: str
    chapter: str  # whose parameters: "01" ... "05"
    outputs: tuple[str, ...]  # files in the results folder
    compute: str
    parameters: tuple[str, ...] = ()  # the parameters it reads (empty: all of its chapter's)
    reads: tuple[str, ...] = ()  # results files of other units
    model: str = ""  # a retrieval unit's one model

    @property
    def module(self) -> str:
        return self.compute.partition(":")[0]


def safe_name(model: str) -> str:
    """A model name as a file and job name ("Qwen/Qwen3-0.6B" -> "Qwen--Qwen3-0.6B")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "--", model)


CH4 = "kvutils.studies.cache_approximations"  # each part's unit in a module of its own
TIMING_PARAMETERS = ("models", "contexts", "timing_repeats", "corpus", "device")
RETRIEVAL_PARAMETERS = ("retrieval_corpus", "retrieval_contexts", "retrieval_prompts", "filler_prompts",
                        "retrieval_depths", "device")
COSTS_PARAMETERS = ("models", "table2_models", "ops", "corpus", "n_docs", "skip_short", "prefill", "decode",
                    "chunk_decode", "contexts", "frontier_models", "frontier_ops", "frontier_docs",
                    "frontier_prefill",
                    "frontier_decode", "device")
CHAPTER_UNITS = {
    "01": Unit("01", "01", (f"{NOTEBOOKS['01']}.json",), "kvutils.studies.cache_exactness:compute"),
    "02": Unit("02", "02", (f"{NOTEBOOKS['02']}.json",),
               "kvutils.studies.sense_probes.study:compute_contrast"),
    "03": Unit("03", "03", (f"{NOTEBOOKS['03']}.json",), "kvutils.studies.sense_probes.study:compute_probes"),
    "05": Unit("05", "05", (f"{NOTEBOOKS['05']}.json",), "kvutils.studies.qwen3_switch.run:compute"),
}
TIMING = Unit("timing", "04", ("04_decode_timing.json",), f"{CH4}.timing:compute", TIMING_PARAMETERS)
COSTS = Unit("costs", "04", ("04_costs.json",), f"{CH4}.table2:compute", COSTS_PARAMETERS)


def retrieval_unit(model: str) -> Unit:
    return Unit(RETRIEVAL + safe_name(model), "04", (f"04_retrieval.{safe_name(model)}.json",),
                f"{CH4}.retrieval_unit:compute", RETRIEVAL_PARAMETERS, model=model)


def retrieval_models(p) -> list[str]:
    """Chapter 4's retrieval models as its `retrieval_models` names them ("" or blank: none); the
    names are checked (and resolved) by the chapter's `plan`."""
    value = p.retrieval_models
    if isinstance(value, str) and not value.strip():
        return []
    names = value.split(",") if isinstance(value, str) else list(value)
    return [name.strip() for name in names if name.strip()]


def chapter4_units(models: list[str]) -> list[Unit]:
    """Chapter 4's units: the timing, one retrieval unit per model, the costs, then the one relating them."""
    parts = [TIMING, *map(retrieval_unit, models), COSTS]
    relate = Unit("04", "04", ("04_retrieval.json", f"{NOTEBOOKS['04']}.json"), f"{CH4}.units:relate",
                  reads=tuple(out for unit in parts for out in unit.outputs))
    return [*parts, relate]


# --------------------------------------------------------------------------- inputs


def _named_paths(parameters: dict, root: Path) -> list[Path]:
    """Files and folders the parameters name (each value, and each comma-separated part of a string)."""
    found = []
    for value in parameters.values():
        for part in str(value).split(",") if isinstance(value, str) else []:
            part = part.strip()
            if part and "\n" not in part and len(part) < 512:
                path = Path(part).expanduser()
                path = path if path.is_absolute() else root / path
                if path.exists():
                    found.append(path)
    return found


def _path_digest(path: Path) -> str:
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        h.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
        stat = file.stat()
        if stat.st_size > LARGE:
            h.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
        else:
            h.update(file.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def unit_parameters(unit: Unit, checked) -> dict:
    """The parameters `unit` reads, as its record keeps them."""
    values = {k: v for k, v in checked.as_dict().items() if k != "results_dir"}
    chosen = {k: values[k] for k in unit.parameters} if unit.parameters else values
    return {**chosen, "model": unit.model} if unit.model else chosen


def code_files(unit: Unit, root: Path = REPO_ROOT) -> tuple[list[Path], list[str]]:
    """(the kvutils files `unit` runs, the data files they name)."""
    return closure([unit.module], root)


def inputs_hash(unit: Unit, checked, results_dir: str | Path, root: Path = REPO_ROOT) -> str:
    """The sha256 of everything `unit`'s results depend on (see the module's text)."""
    parameters = unit_parameters(unit, checked)
    sources, data = code_files(unit, root)
    h = hashlib.sha256()
    h.update(json.dumps({"unit": unit.name, "parameters": parameters}, sort_keys=True, default=str).encode())
    h.update(digest_files(sources, root).encode())
    h.update(digest_files([root / name for name in data], root).encode())
    h.update(digest_files([root / pin for pin in PINS], root).encode())
    # named inside the checkout: as a path of it, wherever it lies
    for path in _named_paths(parameters, root):
        shown = path.relative_to(root) if path.is_relative_to(root) else path
        h.update(str(shown).encode() + b"\0" + _path_digest(path).encode())
    for name in unit.reads:
        h.update(f"{name}:{jobrecords.file_digest(Path(results_dir) / name)}".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- running


def checkpoint_folder(results_dir: Path, name: str, inputs: str) -> Path:
    return Path(results_dir) / jobrecords.RECORDS / "checkpoints" / f"{name}-{inputs[:16]}"


def stored_units(folder: Path) -> int:
    """The finished units in a checkpoint folder (a unit being written is a hidden folder)."""
    return sum(1 for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else 0


@contextmanager
def unit_checkpoints(results_dir: Path, name: str, inputs: str) -> Iterator[int]:
    """The unit's checkpoint folder (kvutils.core.checkpoints) for the length of the block, named by
    its inputs hash; yields the units an interrupted run of the same inputs stored. The caller holds
    the unit's lock: only this unit's folders of other inputs are removed, never another unit's."""
    from kvutils.core import checkpoints  # torch: not for a refusal before any work

    folder = checkpoint_folder(results_dir, name, inputs)
    for other in folder.parent.glob(f"{name}-*"):
        if other != folder and other.name[len(name) + 1:].isalnum():
            shutil.rmtree(other, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    stored = stored_units(folder)
    if stored:
        print(f"== {name}: resuming from the {stored} unit(s) an interrupted run stored ({folder})",
              flush=True)
    previous = os.environ.get(checkpoints.ENV)
    os.environ[checkpoints.ENV] = str(folder)
    try:
        yield stored
    finally:
        if previous is None:
            os.environ.pop(checkpoints.ENV, None)
        else:
            os.environ[checkpoints.ENV] = previous


def run_unit(unit: Unit, checked, results_dir: str | Path, *, profile: str = "full",
             extra: dict | None = None,
             quiet: bool = False) -> dict:
    """Reuse `unit` or compute it (see the module's text); returns its record. `extra`: fields the
    caller adds to a computed unit's record (make book's threads and machine load)."""
    folder = Path(results_dir).expanduser().resolve()
    expected = inputs_hash(unit, checked, folder)
    outputs = [folder / name for name in unit.outputs]
    record = jobrecords.read_record(folder, unit.name)
    why = jobrecords.stale_reason(record, expected, outputs)
    if why is None:
        if not quiet:
            print(f"== {unit.name}: reused, computed at commit {record['commit'][:12]} on "
                  f"{record['finished']} ({record['wall_s']:.0f} s); its inputs are unchanged", flush=True)
        return record
    print(f"== {unit.name}: computing: {why}", flush=True)
    lock = f"unit-{unit.name}"
    results.claim(folder, lock, "results_dir")  # before anything is removed or written
    try:
        started, began = time.time(), jobrecords.now()
        with unit_checkpoints(folder, unit.name, expected) as resumed:
            module, _, function = unit.compute.partition(":")
            getattr(importlib.import_module(module), function)(checked, folder, unit)
        record = jobrecords.new_record(unit.name, "chapter" if unit.name in CHAPTER_UNITS else "study",
                                       expected, profile, unit_parameters(unit, checked), outputs,
                                       time.time() - started, began, resumed, **(extra or {}))
        jobrecords.write_record(folder, unit.name, record)
        shutil.rmtree(checkpoint_folder(folder, unit.name, expected), ignore_errors=True)
    finally:
        results.release(folder, lock)
    print(f"== {unit.name}: computed in {record['wall_s']:.0f} s", flush=True)
    return record


def units_of(chapter: str, checked) -> list[Unit]:
    """The units a chapter's results come from, in the order they run."""
    if chapter != "04":
        return [CHAPTER_UNITS[chapter]]
    return chapter4_units(retrieval_models(checked))


READ_ONLY_ENV = "KVUTILS_READ_RESULTS"  # set (to 1): a page reads the results there, computing nothing


def chapter_results(checked, profile: str = "full") -> tuple[dict, list[dict]]:
    """A chapter notebook's study cell: every unit of its chapter reused or computed (see
    `run_unit`), then its results file read back through its format: (numbers, models described).
    With KVUTILS_READ_RESULTS=1 the results file in results_dir is read as it is, whatever
    computed it (a page drawn from results someone else computed)."""
    from kvutils.core import records

    chapter = next(n for n, name in NOTEBOOKS.items() if name == checked.NOTEBOOK)
    for unit in [] if os.environ.get(READ_ONLY_ENV) else units_of(chapter, checked):
        run_unit(unit, checked, checked.results_dir, profile=profile)
    record = records.load_results(checked.results_dir, checked.NOTEBOOK)
    return record["numbers"], record["models"]
