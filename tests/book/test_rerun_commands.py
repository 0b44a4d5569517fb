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


def test_a_misspelt_parameter_on_papermills_command_line_is_said_first_in_one_line(tmp_path):
    """The reason comes before papermill's traceback, on the terminal (the kernel's own stderr), and
    the notebook's traceback ends at the check, without kvutils' frames inside it."""
    argv = [str(Path(sys.executable).parent / "papermill"), "notebooks/02_bert_contrast.ipynb", str(tmp_path / "out.ipynb"),
            "--cwd", str(REPO_ROOT), "-p", "batchsize", "4", "-p", "results_dir", str(tmp_path / "res")]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    reason = "02_bert_contrast: refused in its first cell: batchsize: not a parameter of 02_bert_contrast"
    assert reason in done.stderr and "did you mean batch_size?" in done.stderr, done.stderr[-3000:]
    assert done.stderr.index(reason) < done.stderr.index("Traceback"), done.stderr[-3000:]
    errors = [o for c in json.loads((tmp_path / "out.ipynb").read_text())["cells"] for o in c.get("outputs", [])
              if o["output_type"] == "error"]
    assert len(errors) == 1 and errors[0]["ename"] == "ValueError"
    frames = [line for line in errors[0]["traceback"] if "kvutils/core/params.py" in line]
    assert not frames, "the check's own frames are left out"
    assert not (tmp_path / "res").exists() or not any((tmp_path / "res").iterdir())
