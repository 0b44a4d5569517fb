"""Sharing the machine's cores among the jobs of one `make book`: a job still running when another
has finished takes the cores it freed.

GNU make starts one job per core, each on one torch thread; without this, the last job of a build
(chapter 5's training, the longest) would run on one thread while the other cores sat idle. Each
running job holds a slot, a file in the folder named by SLOTS_ENV (`kvutils.book.build_jobs` makes
one per job, with its process id, and removes it when the job ends, or a later count finds its
process gone). A long loop calls `share()` now and then: it sets torch's thread count to the
machine's cores divided among the live slots, at least one, at most the job's own cores
(CORES_ENV). Nothing happens outside a build (SLOTS_ENV unset). The thread counts a job ran on are
appended to its slot's `.threads` file, for its record.

Changing the thread count can change a float32 result in its last bits (a matrix product sums in
another order): a job's record names the threads it ran on.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

SLOTS_ENV = "KVUTILS_CORE_SLOTS"  # the folder of the build's running jobs' slots
CORES_ENV = "KVUTILS_CORES"  # the cores one job may take at most (make book's CORES)
JOB_ENV = "KVUTILS_JOB"  # this job's name: its slot is <slots>/<job>
EVERY_S = 10.0  # seconds between two looks at the slots

_last = {"at": float("-inf")}


def live_slots(folder: Path) -> list[str]:
    """The jobs whose slot's process is still alive (a slot left by a killed job is ignored)."""
    alive = []
    for slot in folder.glob("*.pid"):
        try:
            pid = int(slot.read_text().strip())
            os.kill(pid, 0)
        except (OSError, ValueError):
            continue
        alive.append(slot.stem)
    return sorted(alive)


def fair_threads(cores: int, running: int) -> int:
    """One job's share of `cores` among `running` jobs: at least one thread."""
    return max(1, cores // max(1, running))


def share(force: bool = False) -> int | None:
    """Inside a build, set torch's threads to this job's share of the cores (at most every EVERY_S
    seconds unless `force`); returns the thread count set, or None outside a build."""
    folder = os.environ.get(SLOTS_ENV)
    if not folder:
        return None
    now = time.monotonic()
    if not force and now - _last["at"] < EVERY_S:
        return None
    _last["at"] = now
    import torch

    cores = int(os.environ.get(CORES_ENV) or os.cpu_count() or 1)
    threads = fair_threads(cores, len(live_slots(Path(folder))))
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
        job = os.environ.get(JOB_ENV)
        if job:
            with open(Path(folder) / f"{job}.threads", "a", encoding="utf-8") as f:
                f.write(f"{threads}\n")
    return threads


def threads_used(folder: Path, job: str) -> list[int]:
    """The thread counts `share` set in this job, in order (empty: it never changed them)."""
    path = Path(folder) / f"{job}.threads"
    if not path.is_file():
        return []
    return [int(line) for line in path.read_text(encoding="utf-8").split() if line.strip().isdigit()]
