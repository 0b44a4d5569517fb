"""Chapter 4's relating unit (kvutils.studies.units): the chapter's results from its three parts,
in seconds, loading no model. The parts' units are in `timing`, `retrieval_unit` and `table2`."""

from __future__ import annotations

import time
from pathlib import Path

from kvutils.core import records, results
from kvutils.studies.cache_approximations import study
from kvutils.studies.cache_approximations.table2 import COSTS_FILE
from kvutils.studies.parameters.chapter4 import Chapter4Parameters


def relate(p: Chapter4Parameters, folder: Path, unit) -> None:
    """The chapter's results from its parts: 04_retrieval.json (every model's retrieval) and
    04_cache_approximations.json (`study.relate`). Loads no model."""
    started = time.time()
    timings = records.load_record(
        folder / study.DECODE_TIMING_FILE, "04_decode_timing", "results_dir", "rerun chapter 4"
    )
    parts = [
        records.load_json(folder / name, "results_dir", "rerun chapter 4", "run chapter 4 first")
        for name in unit.reads
        if name.startswith("04_retrieval.")
    ]
    costs = records.load_json(folder / COSTS_FILE, "results_dir", "rerun chapter 4", "run chapter 4 first")
    scored = {name: value for part in parts for name, value in part["retrieval"].items()}
    described = [d for part in parts for d in part["models"]]
    merged_key = {
        "models": list(scored),
        "device": p.device,
        "prompts": {name: prompts for part in parts for name, prompts in part["key"]["prompts"].items()},
    }
    results.write_json_atomic(
        folder / study.RETRIEVAL_FILE,
        {
            "key": merged_key,
            "retrieval": scored,
            "models": described,
            "wall_time_s": round(sum(part["wall_time_s"] for part in parts), 2),
        },
    )
    numbers = study.relate(timings, scored, costs["numbers"])
    models = costs["models"] + [d for d in described if d not in costs["models"]]
    results.save_results(folder, p.NOTEBOOK, p.as_dict(), models, results.as_written(numbers), started)
