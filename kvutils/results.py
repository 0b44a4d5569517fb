"""One results file per chapter run, written atomically, and the figures saved beside it.

`results/<chapter>.json` holds the parameters, the models (id, weight-file hash), package versions,
git commit, machine, wall time and every number the chapter reports. Writing goes to a temporary
file in the same folder and is renamed over the old one, so an interrupted run leaves the previous
results intact.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .paths import REPO_ROOT, resolve_path

PACKAGES = ("kvutils", "torch", "transformers", "gguf", "safetensors", "tokenizers", "numpy",
            "papermill", "jupyter-book", "matplotlib", "seaborn", "peft")


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def git_commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit or "unknown") + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


def _jsonable(value: Any) -> Any:
    """Plain JSON: tensors and numpy scalars to numbers, NaN/inf to None (JSON has neither)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(_jsonable(data), fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def results_path(results_dir: str | Path, chapter: str) -> Path:
    return Path(results_dir) / f"{chapter}.json"


def save_results(results_dir: str | Path, chapter: str, parameters: dict, models: list[dict],
                 numbers: dict, started: float) -> Path:
    """Write results/<chapter>.json atomically and return its path. `started` is time.time() at
    the start of the run."""
    record = {"chapter": chapter, "parameters": parameters, "models": models, "numbers": numbers,
              "wall_time_s": round(time.time() - started, 2), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "git_commit": git_commit(), "packages": package_versions(), "machine": machine()}
    path = results_path(results_dir, chapter)
    write_json_atomic(path, record)
    return path


def load_results(results_dir: str | Path, chapter: str) -> dict:
    return json.loads(resolve_path(results_path(results_dir, chapter)).read_text())


def save_figure(fig, results_dir: str | Path, name: str) -> Path:
    """Save `fig` as results/figures/<name>.png (atomically, like the JSON)."""
    path = Path(results_dir) / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
