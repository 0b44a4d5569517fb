"""Chapter 4's units of computation (kvutils.studies.units): each takes the chapter's checked
parameters, the results folder and its unit, and writes its files there atomically."""
from __future__ import annotations

import os
import time
from pathlib import Path

from kvutils.core import cores, records, results
from kvutils.models.loading import load
from kvutils.studies.cache_approximations import retrieval, study
from kvutils.studies.parameters.chapter4 import Chapter4Parameters

COSTS_FILE = "04_costs.json"


def _write(folder: Path, name: str, value: dict) -> None:
    results.write_json_atomic(Path(folder) / name, value)


def compute_timing(p: Chapter4Parameters, folder: Path, unit) -> None:
    """The decode steps with and without the cache, and the bytes a real cache held."""
    alone = bool(os.environ.get(cores.JOB_ENV))  # make book runs this unit alone, on every core
    where = "alone, as the build's first job, before the chapters ran side by side" if alone else \
        "in this chapter's run"
    _write(folder, unit.outputs[0], study.decode_timings(study.plan(p), where))


def _models_key(planned: study.Plan, models: list[str]) -> dict:
    key = study.retrieval_key(planned)
    return {**key, "models": models, "prompts": {m: key["prompts"][m] for m in models}}


def compute_retrieval(p: Chapter4Parameters, folder: Path, unit) -> None:
    """The long-range retrieval test on one model (`unit.model`)."""
    started, planned = time.time(), study.plan(p)
    name = next(m for m in planned.retrieval_models if m == unit.model or m.endswith(unit.model))
    loaded = load(name, "float32", device=planned.device)
    scored = retrieval.score_model(loaded, planned.retrieval_prompts[name])
    _write(folder, unit.outputs[0], {"key": _models_key(planned, [name]), "retrieval": {name: scored},
                                     "models": [loaded.describe()], "wall_time_s": round(time.time() - started, 2)})


def compute_costs(p: Chapter4Parameters, folder: Path, unit) -> None:
    """Table 2, the frontier and the bytes of Table 1."""
    started = time.time()
    numbers, described = study.score_costs(study.plan(p))
    _write(folder, unit.outputs[0], {"numbers": results.as_written(numbers), "models": described,
                                     "wall_time_s": round(time.time() - started, 2)})


def relate(p: Chapter4Parameters, folder: Path, unit) -> None:
    """The chapter's results from its parts: 04_retrieval.json (every model's retrieval) and
    04_cache_approximations.json (`study.relate`). Loads no model."""
    started = time.time()
    timings = records.load_record(folder / study.DECODE_TIMING_FILE, "04_decode_timing", "results_dir",
                                  "rerun chapter 4")
    parts = [records.load_json(folder / name, "results_dir", "rerun chapter 4", "run chapter 4 first")
             for name in unit.reads if name.startswith("04_retrieval.")]
    costs = records.load_json(folder / COSTS_FILE, "results_dir", "rerun chapter 4", "run chapter 4 first")
    scored = {name: value for part in parts for name, value in part["retrieval"].items()}
    described = [d for part in parts for d in part["models"]]
    merged_key = {"models": list(scored), "device": p.device,
                  "prompts": {name: prompts for part in parts for name, prompts in part["key"]["prompts"].items()}}
    _write(folder, study.RETRIEVAL_FILE, {"key": merged_key, "retrieval": scored, "models": described,
                                          "wall_time_s": round(sum(part["wall_time_s"] for part in parts), 2)})
    numbers = study.relate(timings, scored, costs["numbers"])
    models = costs["models"] + [d for d in described if d not in costs["models"]]
    results.save_results(folder, p.NOTEBOOK, p.as_dict(), models, results.as_written(numbers), started)
