"""make book's jobs share the cores: a job still running takes those of the jobs that ended
(kvutils.core.cores), and its record names every thread count it ran on."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kvutils.book import build_jobs
from kvutils.core import cores


@pytest.fixture
def threads():
    """torch's thread count is the process's: put it back after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_a_job_gets_its_share_of_the_cores_and_at_least_one():
    assert [cores.fair_threads(8, n) for n in (0, 1, 2, 3, 8, 9)] == [8, 8, 4, 2, 1, 1]
    assert cores.fair_threads(1, 2) == 1


def test_a_slot_whose_process_is_gone_does_not_count(tmp_path):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "04.pid").write_text(str(sleeper.pid))
        (tmp_path / "05.pid").write_text(str(os.getpid()))
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        (tmp_path / "01.pid").write_text(dead.stdout.strip())  # that process has exited
        (tmp_path / "03.pid").write_text("not a pid")
        assert cores.live_slots(tmp_path) == ["04", "05"]
    finally:
        sleeper.kill()
        sleeper.wait()
    assert cores.live_slots(tmp_path) == ["05"]


def test_share_takes_the_cores_another_job_freed_and_records_each_change(tmp_path, monkeypatch, threads):
    monkeypatch.setenv(cores.SLOTS_ENV, str(tmp_path))
    monkeypatch.setenv(cores.JOB_ENV, "05")
    monkeypatch.setenv(cores.CORES_ENV, "2")
    torch.set_num_threads(1)
    (tmp_path / "05.pid").write_text(str(os.getpid()))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "04.pid").write_text(str(sleeper.pid))
        assert cores.share(force=True) == 1 and torch.get_num_threads() == 1  # chapter 4 still runs beside it
    finally:
        sleeper.kill()
        sleeper.wait()
    assert cores.share(force=True) == 2 and torch.get_num_threads() == 2  # alone now: both cores
    assert cores.share() is None  # looked a moment ago: no second look within EVERY_S
    assert cores.threads_used(tmp_path, "05") == [2]


def test_outside_a_build_share_changes_nothing(monkeypatch, threads):
    monkeypatch.delenv(cores.SLOTS_ENV, raising=False)
    before = torch.get_num_threads()
    assert cores.share(force=True) is None and torch.get_num_threads() == before


def test_a_job_holds_its_slot_while_it_runs_and_leaves_none_even_when_it_fails(tmp_path, monkeypatch):
    monkeypatch.delenv(cores.SLOTS_ENV, raising=False)
    folder = tmp_path / "jobs" / build_jobs.SLOTS
    with build_jobs.core_slot(tmp_path, "05") as used:
        assert cores.live_slots(Path(os.environ[cores.SLOTS_ENV])) == ["05"]
        (folder / "05.threads").write_text("2\n1\n")  # as the job's kernel writes them
    assert used == [2, 1] and not list(folder.iterdir()) and cores.SLOTS_ENV not in os.environ
    with pytest.raises(KeyboardInterrupt), build_jobs.core_slot(tmp_path, "04"):
        raise KeyboardInterrupt
    assert not list(folder.iterdir())
