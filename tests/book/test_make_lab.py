"""`make lab` (issue 39): JupyterLab from the venv starts, serves the repository's notebooks, has
the widgets' extension the attention explorer needs, and stops on Ctrl-C."""
import json
import os
import re
import signal
import subprocess
import time
import urllib.request

import pytest

from kvutils.core.paths import REPO_ROOT

pytestmark = pytest.mark.slow  # about 15 s: JupyterLab's start


def _get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode()


def _ctrl_c_as_in_a_terminal() -> None:
    """A command started in the background of a non-interactive shell (as CI may start make test)
    inherits SIGINT ignored, and so would make and JupyterLab: give them a terminal's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_make_lab_serves_the_notebooks_and_stops(tmp_path):
    log = tmp_path / "lab.log"
    with open(log, "w") as out:
        lab = subprocess.Popen(["make", "--no-print-directory", "lab", "LAB_ARGS=--no-browser --port=0 "
                                "--ServerApp.token=kv"], cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL,
                               start_new_session=True, preexec_fn=_ctrl_c_as_in_a_terminal)
    try:
        url = None
        for _ in range(120):
            if found := re.search(r"(http://127\.0\.0\.1:\d+)/lab", log.read_text()):
                url = found.group(1)
                break
            assert lab.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        assert url, log.read_text()[-3000:]
        status, page = _get(f"{url}/lab?token=kv")
        assert status == 200 and "JupyterLab" in page
        status, listing = _get(f"{url}/api/contents/notebooks?token=kv")
        names = {item["name"] for item in json.loads(listing)["content"]}
        assert {"03_sense_probes.ipynb", "05_qwen3_switch.ipynb"} <= names
        extensions = REPO_ROOT / ".venv" / "share" / "jupyter" / "labextensions" / "@jupyter-widgets" / "jupyterlab-manager"
        assert extensions.is_dir()
    finally:
        os.killpg(lab.pid, signal.SIGINT)  # a terminal's Ctrl-C to make and JupyterLab ...
        time.sleep(1)
        if lab.poll() is None:  # ... twice: without a terminal to confirm on, the first one only asks
            os.killpg(lab.pid, signal.SIGINT)
        try:
            lab.wait(timeout=90)  # under a loaded machine JupyterLab takes its time to shut down
            killed = False
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
            killed = True
    assert not killed, "make lab did not stop on Ctrl-C: " + log.read_text()[-2000:]
    with pytest.raises(OSError):
        _get(f"{url}/api/status?token=kv")
