"""Where things live: the repository root, and relative paths that work from any working directory."""
from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def resolve_path(path: str | Path) -> Path:
    """`path` as given if it exists from here (or is absolute), else relative to the repository
    root, so `data/senses.json` works whether papermill runs in the repo root or in notebooks/."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    from_root = REPO_ROOT / given
    return from_root if from_root.exists() else given
