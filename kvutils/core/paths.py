"""Where things live: the repository checkout, and relative paths that work from any working directory.

kvutils reads files of its repository (data/*.json, notebooks/*.ipynb, constraints.txt). It uses
the checkout it sits in (an editable install, or PYTHONPATH pointing into a clone); an installed
copy outside a checkout (`pip install .` puts kvutils in site-packages) is pointed at a clone with
KVUTILS_REPO. Without either, `import kvutils` and the functions that read no repository file
still work; the first read of a repository file raises RepositoryNotFound, saying how to fix it.

`REPO_ROOT` is `repo_root()` as a module attribute, found when it is read (or imported).
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

REPO_ENV = "KVUTILS_REPO"  # names a checkout, for a kvutils installed outside one
CHECKOUT_FOLDERS = ("data", "notebooks")  # what makes a folder a checkout of the repository
PACKAGE_PARENT = Path(__file__).resolve().parents[2]  # the folder that holds the kvutils package


class RepositoryNotFound(RuntimeError):
    """kvutils needs a file of its repository, but sits outside a checkout and KVUTILS_REPO names none."""


def is_checkout(folder: Path) -> bool:
    return all((folder / name).is_dir() for name in CHECKOUT_FOLDERS)


def repo_root(needing: str = "the files of its repository") -> Path:
    """The checkout kvutils sits in, else the one KVUTILS_REPO names; else RepositoryNotFound,
    whose message says that kvutils needs `needing` and how to give it a checkout."""
    if is_checkout(PACKAGE_PARENT):
        return PACKAGE_PARENT
    named = os.environ.get(REPO_ENV, "").strip()
    folders = " and ".join(f"{name}/" for name in CHECKOUT_FOLDERS)
    fix = ("Install kvutils from a clone of its repository with `pip install -e .` (run in the clone's "
           f"folder), or set {REPO_ENV} to the folder of a clone")
    if not named:
        raise RepositoryNotFound(f"kvutils needs {needing}, but it is installed at "
                                 f"{PACKAGE_PARENT / 'kvutils'}, outside a checkout of its repository (no "
                                 f"{folders} next to it), and {REPO_ENV} is not set. {fix}.")
    folder = Path(named).expanduser().resolve()
    if not is_checkout(folder):
        raise RepositoryNotFound(f"kvutils needs {needing}, but {REPO_ENV}={named} is not a checkout of its "
                                 f"repository (it needs {folders}). {fix}.")
    return folder


def repo_file(relative: str) -> Path:
    """A file of the repository ("data/senses.json"); RepositoryNotFound without a checkout."""
    return repo_root(needing=relative) / relative


def resolve_path(path: str | Path) -> Path:
    """`path` as given if it exists from here (or is absolute), else relative to the repository
    root, so `data/senses.json` works whether papermill runs in the repo root or in notebooks/.
    Without a checkout, a relative path that is not here raises RepositoryNotFound."""
    given = Path(path).expanduser()
    if given.is_absolute() or given.exists():
        return given
    from_root = repo_root(needing=f"{given} (it is not in the working directory, {Path.cwd()})") / given
    return from_root if from_root.exists() else given


def link_loop(path: str | Path) -> Path | None:
    """The first part of `path` that is a symbolic link whose chain comes back to itself (following it
    never ends: the system's "too many levels of symbolic links"), or None."""
    try:
        os.stat(path)
        return None
    except OSError as err:
        if err.errno != errno.ELOOP:
            return None
    given = Path(path)
    for n in range(1, len(given.parts) + 1):
        part = Path(*given.parts[:n])
        try:
            os.stat(part)
        except OSError as err:
            if err.errno == errno.ELOOP:
                return part
            return None
    return given


def loop_error(parameter: str, shown: str | Path, loop: Path) -> ValueError:
    """The error for a path that runs into a symbolic-link loop (see `link_loop`)."""
    where = "" if str(loop) == str(shown) else f" ({loop} in it)"
    return ValueError(f"{parameter}: {shown}{where} is a loop of symbolic links ({loop} -> "
                      f"{os.readlink(loop)} -> ... leads back to itself, so it names no file or folder); "
                      "point the link at a real one")


def __getattr__(name: str) -> Path:
    if name == "REPO_ROOT":
        return repo_root()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
