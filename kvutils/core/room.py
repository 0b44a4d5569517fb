"""Room on the disk for a run's results, checked before the work (a full disk once refused a chapter
only when it wrote its results, after its compute).

A run writes `<results_dir>/<chapter>.json` and its figures, staged beside the previous ones and
then put in their place (kvutils.core.results.save_run), so it needs about as much free room as the
previous run's results took, and at least MIN_FREE where there is no previous run.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

# the full build's largest results file is chapter 4's, 3.6 MB, with 8 figures of about 0.1 MB each
# (tests/data/full_build); twice that leaves room for a larger run than the book's
MIN_FREE = 8 * 2**20


def previous_size(folder: Path, chapter: str) -> int:
    """Bytes of the previous run's results file and the figures it lists; 0 where there is none."""
    record = folder / f"{chapter}.json"
    if not record.is_file():
        return 0
    size = record.stat().st_size
    try:
        figures = json.loads(record.read_text(encoding="utf-8")).get("figures", {})
    except (OSError, ValueError, AttributeError):
        return size
    for entry in figures.values() if isinstance(figures, dict) else []:
        path = folder / str(entry.get("file", "")) if isinstance(entry, dict) else None
        if path is not None and path.is_file():
            size += path.stat().st_size
    return size


def needed(folder: Path, chapter: str) -> int:
    return max(MIN_FREE, previous_size(folder, chapter))


def check_room(folder: str | Path, chapter: str, parameter: str = "results_dir") -> None:
    """Fail now, naming `parameter`, where the disk of `folder` (or of its nearest existing parent)
    has less free room than the run's results need."""
    folder = Path(folder)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free, need = shutil.disk_usage(existing).free, needed(folder, chapter)
    if free < need:
        raise ValueError(f"{parameter}: only {_size(free)} free on the disk of {folder}, and {chapter}'s "
                         f"results need about {_size(need)} (the previous run's results and figures, at "
                         f"least {_size(MIN_FREE)}); free some room or give another folder")


def _size(n: int) -> str:
    return f"{n / 2**20:,.1f} MB" if n >= 2**20 else f"{n / 2**10:,.0f} KB"
