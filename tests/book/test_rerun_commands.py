"""The README's rerun, as a reader types it: papermill's own command line, which passes `-p lr
0.003` as a float and `-p k_values 1,2` as text, on a chapter of the quick profile; the results file
it writes passes its own format (issue 38: the work used to be lost at the end, refused by the
schema)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvutils.book.chapters import QUICK
from kvutils.core import records
from kvutils.core.paths import REPO_ROOT


@pytest.mark.slow  # about 40 s: chapter 5 on the tiny Qwen3
def test_papermills_command_line_with_a_number_a_list_and_a_model(tmp_path):
    given = {**QUICK["05_qwen3_switch"], "models": "tiny-qwen3", "k_values": "1,2", "patch_k": 2, "lr": 0.003}
    argv = [str(Path(sys.executable).parent / "papermill"), "notebooks/05_qwen3_switch.ipynb", str(tmp_path / "out.ipynb"),
            "--cwd", str(REPO_ROOT), "-p", "results_dir", str(tmp_path / "res")]
    for name, value in given.items():
        argv += ["-p", name, str(value)]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    record = records.load_results(tmp_path / "res", "05_qwen3_switch")  # checked against its schema
    assert record["parameters"]["lr"] == "0.003" and record["parameters"]["k_values"] == "1,2"
    assert record["parameters"]["patch_k"] == 2 and record["numbers"]["tiny-qwen3"]["k_values"] == [1, 2]
    assert json.loads((tmp_path / "out.ipynb").read_text())["metadata"]["papermill"]["parameters"]["lr"] == 0.003
