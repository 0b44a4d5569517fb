"""The record a finished computation leaves: <results>/jobs/<name>.json, written after its results,
holding its inputs hash and the sha256 of each file it wrote (kvutils.core.schemas/job.schema.json).
An interrupted computation leaves no record, so the next build computes it again; a record stands
only while its hash is the inputs' hash and its files still hold what it wrote."""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

RECORDS = "jobs"  # <results>/jobs/<name>.json


def record_path(results_dir: str | Path, name: str) -> Path:
    return Path(results_dir) / RECORDS / f"{name}.json"


def read_record(results_dir: str | Path, name: str) -> dict | None:
    """The last record, or None where there is none or it cannot be read (then it reruns)."""
    try:
        record = json.loads(record_path(results_dir, name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def file_digest(path: Path) -> str | None:
    path = Path(path)
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def stale_reason(record: dict | None, expected_hash: str, outputs: list[Path]) -> str | None:
    """Why a computation must run (None: its record stands and every output holds what it wrote)."""
    if record is None:
        return "never built here, or interrupted before it finished"
    if record.get("inputs_hash") != expected_hash:
        return "its inputs changed (its parameters, its code, its data, the pins, or a file it reads)"
    for path in outputs:
        if record.get("outputs", {}).get(Path(path).name) != file_digest(path):
            return f"{path} is not the file it wrote (missing or changed since)"
    return None


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


def new_record(name: str, kind: str, inputs: str, profile: str, parameters: dict, outputs: list[Path],
               wall: float, started: str, resumed: int, **extra) -> dict:
    from kvutils.core.results import git_commit

    record = {"job": name, "kind": kind, "status": "computed", "inputs_hash": inputs, "profile": profile,
              "parameters": parameters, "outputs": {Path(p).name: file_digest(p) for p in outputs},
              "wall_s": round(wall, 2), "threads": None, "threads_used": [1], "load_before": None,
              "load_after": None, "resumed_units": resumed, "commit": git_commit(), "started": started,
              "finished": now(), "checked": now()}
    return {**record, **extra}


def write_record(results_dir: str | Path, name: str, record: dict) -> None:
    from kvutils.core.results import write_json_atomic

    path = record_path(results_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, record)
