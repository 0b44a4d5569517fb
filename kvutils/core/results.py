"""One results file per chapter run and its figures, written as one unit.

`results/<chapter>.json` holds the parameters, the models (id, weight-file hash), package versions,
git commit, machine, wall time, every number the chapter reports and its figures' hashes. A run's
JSON and figures are written as one unit (`save_run`): an interrupted run leaves the previous
results and figures intact, and a reader never sees the new JSON with the old figures or the
reverse. `check_output` checks the output folder before any work starts; `claim` keeps a second
run of the same chapter out of the same folder while the first is running.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from kvutils.core.paths import RepositoryNotFound, link_loop, loop_error, repo_root
from kvutils.core.room import check_room

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
        root = repo_root()
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                                text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError, RepositoryNotFound):
        return "unknown"
    return (commit or "unknown") + ("+dirty" if dirty else "")


BUSY_PCT = 25.0  # a timing is flagged when other work kept more than this share of the CPU busy beside it


def machine_load(sample_s: float = 1.0) -> dict:
    """What else keeps the machine busy now: the share of all cores in use over `sample_s` seconds
    (measured while this process waits, so it is other work's) and the 1-minute load average (which
    lags: it still counts a job that ended a minute ago)."""
    import psutil

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"cpu_busy_pct": psutil.cpu_percent(interval=sample_s), "load_1min": load}


def busy(load: dict | None) -> bool:
    """A time taken with more than BUSY_PCT of the CPU busy with other work, before or after it."""
    return load is not None and (load.get("cpu_busy_pct") or 0) > BUSY_PCT


def machine() -> dict[str, Any]:
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            "torch_threads": torch.get_num_threads()}


def jsonable(value: Any) -> Any:
    """Plain JSON: tensors and numpy scalars to numbers, NaN/inf to None (JSON has neither)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def as_written(numbers: Any) -> Any:
    """`numbers` as a results file holds them (JSON: tensors as lists, NaN as null, keys as
    strings): a chapter's page reads these, so that it shows what its file says."""
    return json.loads(json.dumps(jsonable(numbers)))


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temp(folder: Path, name: str, suffix: str) -> Path:
    """A hidden temporary file beside `name`, tagged with this process's id so that a later run
    can tell it from one still being written (see `clean_stale`)."""
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.{os.getpid()}.", suffix=suffix)
    os.close(fd)
    # mkstemp makes it 0600; results are shared files, so they get the usual mode under the umask
    os.chmod(tmp, 0o666 & ~_umask())
    return Path(tmp)


def _write_with(path: Path, write, suffix: str = ".tmp") -> None:
    """`write(tmp_path)` into a temporary file in `path`'s folder, fsync, then rename over `path`:
    a reader sees the old file or the new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp(path.parent, path.name, suffix)
    try:
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    text = json.dumps(jsonable(data), indent=2, sort_keys=False) + "\n"
    _write_with(Path(path), lambda tmp: tmp.write_text(text, encoding="utf-8"))


def save_figures(results_dir: str | Path, figures: dict) -> list[Path]:
    """Each matplotlib figure of `figures` ({name: fig}) as <results_dir>/figures/<name>.png, each
    written atomically. A page saves the figures it draws from a study's results (the study's
    results file does not change when a page is drawn anew)."""
    bad = [name for name in figures if not re.fullmatch(r"[\w.-]+", name)]
    if bad:
        raise ValueError(f"figures: names must be plain file names, got {bad}")
    paths = []
    for name, fig in figures.items():
        path = Path(results_dir).expanduser() / "figures" / f"{name}.png"
        _write_with(path, lambda tmp, fig=fig: fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight"),
                    suffix=".png")
        paths.append(path)
    return paths


def results_path(results_dir: str | Path, chapter: str) -> Path:
    return Path(results_dir) / f"{chapter}.json"


# --------------------------------------------------------------------------- output paths, checked first


def expand(folder: str | Path, parameter: str) -> Path:
    """`folder` with a leading ~ or ~user expanded; an unknown user is an error naming `parameter`."""
    try:
        return Path(folder).expanduser()
    except RuntimeError:  # pathlib's "Could not determine home directory."
        user = str(folder).split("/", 1)[0]
        raise ValueError(f"{parameter}: {folder} starts with {user}, but there is no user "
                         f"{user[1:]!r} (or no home folder) on this machine; give the folder "
                         "itself") from None


def _writable_folder(folder: Path, parameter: str, shown: str) -> None:
    """`folder` is a folder this process can write in, or can be created; nothing is left behind."""
    loop = link_loop(folder)
    if loop is not None:
        raise loop_error(parameter, shown, loop)
    existing = folder
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # mkdir there would fail with a bare "File exists"
            raise ValueError(f"{parameter}: {existing} is a symbolic link to {os.readlink(existing)}, which "
                             "does not exist (a dangling link); create its target or give another folder")
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{parameter}: {shown} cannot be a folder: {existing} is a file")
    if existing != folder:
        first = folder
        while first.parent != existing:
            first = first.parent
        try:  # a real test (os.access says yes to root on read-only mounts), undone at once
            first.mkdir()
            first.rmdir()
        except OSError as err:
            raise ValueError(f"{parameter}: {shown} cannot be created in {existing} "
                             f"({err.strerror or err})") from None
        return
    try:  # a real write: os.access misses read-only mounts for root, ACLs, full disks
        _temp(folder, "write-check", ".tmp").unlink()
    except OSError as err:
        raise ValueError(f"{parameter}: cannot write in {shown} ({err.strerror or err})") from None


def check_folder(folder: str | Path, parameter: str) -> Path:
    """Fail now, naming `parameter`, if `folder` is not a folder this process can write in (or
    create). Leaves no new files."""
    if not isinstance(folder, (str, Path)) or not str(folder).strip():
        raise ValueError(f"{parameter} must be a folder path (a non-empty string), got {folder!r}")
    path = expand(folder, parameter)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{parameter}: {folder} is a file, not a folder")
    _writable_folder(path, parameter, str(folder))
    return path


def check_output(results_dir: str | Path, chapter: str, parameter: str = "results_dir") -> Path:
    """Fail now, naming `parameter`, if the run could not write `<results_dir>/<chapter>.json` and
    its figures, or its disk has no room for them (kvutils.core.room); finish or clear any earlier
    run that was cut short there. Leaves no new files."""
    folder = check_folder(results_dir, parameter)
    for target, want_dir in ((results_path(folder, chapter), False), (folder / "figures", True)):
        if target.exists() and target.is_dir() != want_dir:
            kind = "a folder" if target.is_dir() else "a file"
            what = "the figures" if want_dir else "the results file"
            raise ValueError(f"{parameter}: {target} is {kind}, so {what} cannot be written there; move it "
                             "away")
    if (folder / "figures").is_dir():
        _writable_folder(folder / "figures", parameter, str(folder / "figures"))
    if folder.is_dir():
        recover(folder)
    check_room(folder, chapter, parameter)  # before the work, not when its results are written
    return folder


def check_output_file(path: str | Path, parameter: str) -> Path:
    """Fail now, naming `parameter`, if a file could not be written at `path`. Leaves no new files."""
    path = expand(path, parameter)
    loop = link_loop(path)
    if loop is not None:
        raise loop_error(parameter, path, loop)
    if path.is_dir():
        raise ValueError(f"{parameter}: {path} is a folder; give a file name, e.g. {path / 'accept.json'}")
    _writable_folder(path.parent, parameter, f"{path.parent} (the folder of {path})")
    return path


# --------------------------------------------------------------------------- one writer per chapter results
# file
#
# A chapter's run holds a lock on its results file from its first cell (`claim`) until `save_run`
# has written it: a second run of the same chapter into the same folder is refused at its start,
# naming the first one's pid. Different chapters into one folder (the chapters runner's lanes, make
# book) stay allowed. The lock is the kernel's flock on a file outside results_dir (the folder may
# not exist yet and gets no extra file): it goes when its process ends, however it ends, so a
# killed run leaves nothing stuck.

_CLAIMS: dict[tuple[str, str], tuple[int, int]] = {}  # (results folder, chapter) -> (pid, locked descriptor)


def lock_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"kvutils-locks-{os.getuid()}"


def _lock_file(folder: Path, chapter: str) -> Path:
    key = hashlib.sha256(f"{folder.resolve()}\0{chapter}".encode()).hexdigest()[:20]
    return lock_dir() / f"{chapter}-{key}.lock"


def claim(results_dir: str | Path, chapter: str, parameter: str = "results_dir") -> None:
    """Hold `<results_dir>/<chapter>.json` for this process until `save_run` writes it (see
    above); another live run holding it is an error naming its pid. Claiming again is a no-op."""
    folder = expand(results_dir, parameter)
    key = (str(folder.resolve()), chapter)
    if _CLAIMS.get(key, (None,))[0] == os.getpid():  # a forked child holds nothing of its parent's
        return
    path = _lock_file(folder, chapter)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    while True:
        fd = _locked(path, chapter, results_dir, parameter)
        try:  # the holder deletes the file as it lets go: a lock on a deleted file holds nothing
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _CLAIMS[key] = (os.getpid(), fd)


def _locked(path: Path, chapter: str, results_dir, parameter: str) -> int:
    """A descriptor of `path` holding its flock; another holder is an error naming its pid."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ValueError(f"{parameter}: another run (pid {holder}) is writing {chapter}'s results in "
                         f"{results_dir} now; wait for it to end, or give this run another "
                         "results_dir") from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def release(results_dir: str | Path, chapter: str) -> None:
    """Give up this process's claim (see `claim`), if it holds one."""
    folder = Path(results_dir).expanduser()
    pid, fd = _CLAIMS.pop((str(folder.resolve()), chapter), (None, None))
    if pid == os.getpid():
        _lock_file(folder, chapter).unlink(missing_ok=True)  # while still held: see `claim`
        os.close(fd)  # closing the only descriptor releases the flock


# --------------------------------------------------------------------------- a run: results and figures as
# one unit
#
# A run is staged in a hidden folder <results_dir>/.<chapter>.run-<pid>-<random>/ (figures, then
# the JSON naming them with their sha256). The JSON's rename inside that folder is the commit
# point; then the figures move into figures/ and the JSON to <chapter>.json, last. A run killed
# before the commit point leaves only the hidden folder, which the next `recover` deletes; one
# killed after it is finished by the next `recover` (every write and read of the folder calls it).

_STAGE = re.compile(r"^\.(?P<chapter>.+)\.run-(?P<pid>\d+)-\w+$")
_TEMP = re.compile(r"^\..+\.(?P<pid>\d+)\.\w+\.(tmp|png)$")
STALE_AFTER_S = 24 * 3600  # a live pid this old is a reused one, not the writer


def writer_alive(pid: int, path: Path) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        return time.time() - path.stat().st_mtime < STALE_AFTER_S
    except FileNotFoundError:
        return False


def _finish(stage: Path, folder: Path, chapter: str) -> None:
    """Move a committed run into place: figures first, the JSON naming them last. Idempotent."""
    for png in sorted((stage / "figures").glob("*.png")):
        (folder / "figures").mkdir(exist_ok=True)
        try:
            os.replace(png, folder / "figures" / png.name)
        except FileNotFoundError:  # another process finished this one
            pass
    try:
        os.replace(stage / f"{chapter}.json", results_path(folder, chapter))
    except FileNotFoundError:
        pass
    shutil.rmtree(stage, ignore_errors=True)


def recover(results_dir: str | Path) -> list[str]:
    """Finish runs that were killed after their commit point, delete those killed before it and
    stale temporary files; return what was done. Errors are ignored: a read-only results folder
    is still readable."""
    folder, done = Path(results_dir), []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return done
    for entry in entries:
        stage, temp = _STAGE.match(entry.name), _TEMP.match(entry.name)
        try:
            if stage and entry.is_dir() and not writer_alive(int(stage["pid"]), entry):
                if (entry / f"{stage['chapter']}.json").is_file():
                    _finish(entry, folder, stage["chapter"])
                    done.append(f"finished {entry.name}")
                else:
                    shutil.rmtree(entry)
                    done.append(f"removed {entry.name}")
            elif temp and entry.is_file() and not writer_alive(int(temp["pid"]), entry):
                entry.unlink()
                done.append(f"removed {entry.name}")
        except OSError:
            continue
    if folder.name != "figures" and (folder / "figures").is_dir():
        done += recover(folder / "figures")
    return done


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def save_run(results_dir: str | Path, chapter: str, parameters: dict, models: list[dict], numbers: dict,
             started: float, figures: dict | None = None) -> Path:
    """Write <results_dir>/<chapter>.json and figures/<name>.png for every matplotlib figure of
    `figures` ({name: fig}) as one unit (see above); return the JSON's path. The record names
    each figure with its sha256. `started` is time.time() at the start of the run."""
    figures = dict(figures or {})
    bad = [name for name in figures if not re.fullmatch(r"[\w.-]+", name)]
    if bad:
        raise ValueError(f"figures: names must be plain file names, got {bad}")
    folder = Path(results_dir).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        recover(folder)
        stage = _stage_run(folder, chapter, parameters, models, numbers, started, figures)
    except OSError as err:  # a full disk, a folder removed mid-run: name it, not PIL's or json's frame
        raise OSError(err.errno, f"results_dir: cannot write {chapter}'s results in {folder} "
                      f"({err.strerror or err}); its previous results and figures are as they were") from err
    _finish(stage, folder, chapter)
    release(folder, chapter)  # written: the next run of this chapter may start
    return results_path(folder, chapter)


def _stage_run(folder: Path, chapter: str, parameters: dict, models: list[dict], numbers: dict,
               started: float, figures: dict) -> Path:
    """The staged run, committed (its JSON written last); on any failure nothing is left."""
    stage = Path(tempfile.mkdtemp(dir=folder, prefix=f".{chapter}.run-{os.getpid()}-"))
    try:
        os.chmod(stage, 0o777 & ~_umask())
        (stage / "figures").mkdir()
        saved = {}
        for name, fig in figures.items():
            png = stage / "figures" / f"{name}.png"
            fig.savefig(png, dpi=120, bbox_inches="tight")
            saved[name] = {"file": f"figures/{name}.png", "sha256": sha256_of(png)}
        record = {"chapter": chapter, "parameters": parameters, "models": models, "numbers": numbers,
                  "figures": saved, "wall_time_s": round(time.time() - started, 2),
                  "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git_commit": git_commit(),
                  "packages": package_versions(), "machine": machine()}
        write_json_atomic(stage / f"{chapter}.json", record)  # the commit point
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return stage


def save_results(results_dir: str | Path, chapter: str, parameters: dict, models: list[dict],
                 numbers: dict, started: float) -> Path:
    """`save_run` without figures."""
    return save_run(results_dir, chapter, parameters, models, numbers, started)
