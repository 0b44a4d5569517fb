"""Checks that need no model run before a kernel starts (issue 52, 4): `steps`, `lr`, `k_values`,
`patch_k`, the examples' counts and a model named twice are refused by the declaration itself, so
`python -m kvutils.build` and `python -m kvutils.chapters` exit 2 with the parameter's reason before
torch or papermill is imported; and `steps` has an upper bound that follows from the budget."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvutils.core.paths import REPO_ROOT
from kvutils.studies.parameters import Chapter1Parameters, Chapter4Parameters, Chapter5Parameters
from kvutils.studies.parameters.values import MAX_STEPS, split_per_model
from kvutils.studies.qwen3_switch import study as switch

STEPS_BOUND = f"steps must be at most {MAX_STEPS:,} (each step is a forward and backward pass"

REFUSED = [  # (chapter, -p name, -p value, the start of the reason)
    ("05", "steps", "1000000000", STEPS_BOUND),
    ("05", "steps", "1e9", STEPS_BOUND),
    ("05", "steps", "96,tiny-qwen3:200000", STEPS_BOUND),
    ("05", "steps", "2.5", "steps: '2.5' is not a whole number of steps"),
    ("05", "lr", "0", "lr: '0' is not a learning rate > 0"),
    ("05", "lr", "fast", "lr: 'fast' is not a learning rate"),
    ("05", "k_values", "0,2", "k_values: k='0' is not allowed"),
    ("05", "k_values", "2,2", "k_values: 2 given more than once"),
    ("05", "models", "tiny-qwen3,tiny-qwen3", "models names a model twice"),
    ("05", "n_train", "15", "n_train must be even"),
    ("05", "warmup", "1000000", "warmup must be between 0 and 100,000"),
    ("01", "models", "tiny-llama,tiny-llama", "models names a model twice"),
    ("04", "frontier_models", "tiny-llama,tiny-llama", "frontier_models names a model twice"),
]


def _early(args: list[str]) -> dict:
    """Run `kvutils.build.main(args)` in a fresh interpreter: its exit code, its stderr, and whether
    torch or papermill (a kernel's start) was imported."""
    code = ("import json, sys\nfrom kvutils import build\nrc = build.main(sys.argv[1:])\n"
            "print(json.dumps({'rc': rc, 'torch': 'torch' in sys.modules, "
            "'papermill': 'papermill' in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=300)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "stderr": done.stderr}


@pytest.mark.parametrize("chapter, name, value, reason", REFUSED,
                         ids=[f"{c[0]}-{c[1]}={c[2]}" for c in REFUSED])
def test_a_model_free_check_refuses_before_torch_or_a_kernel(tmp_path, chapter, name, value, reason):
    out = _early([chapter, "--profile", "quick", "--results-dir", str(tmp_path), "-p", name, value])
    assert out["rc"] == 2, out["stderr"]
    assert f"python -m kvutils.build {chapter}: {reason}" in out["stderr"]
    assert not out["torch"] and not out["papermill"]  # nothing heavy, no kernel: refused in the first second
    assert not any(tmp_path.iterdir())  # nothing written


def test_patch_k_outside_the_given_k_values_is_refused_before_a_kernel(tmp_path):
    out = _early(["05", "--profile", "quick", "--results-dir", str(tmp_path), "-p", "k_values", "1,2",
                  "-p", "patch_k", "3"])
    assert out["rc"] == 2 and not out["torch"] and not out["papermill"]
    assert "patch_k: 3 is not one of the trained k_values (1,2)" in out["stderr"]


def test_the_chapters_runner_refuses_the_same_before_a_kernel(tmp_path):
    code = ("import sys\nfrom kvutils.book import chapters\n"
            "try:\n    chapters.main(sys.argv[1:])\nexcept SystemExit as e:\n"
            "    print('torch' in sys.modules, 'papermill' in sys.modules, e.code)\n")
    done = subprocess.run([sys.executable, "-c", code, "05", "--profile", "quick",
                           "--results-dir", str(tmp_path), "--output-dir", str(tmp_path / "pages"),
                           "-p", "steps", "1e9"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert done.stdout.split() == ["False", "False", "2"] and STEPS_BOUND in done.stderr


@pytest.mark.parametrize("value", [1e9, "1e9", 10 ** 9, f"96,tiny-qwen3:{MAX_STEPS + 1}"])
def test_steps_past_the_bound_name_the_bound_and_why(value):
    with pytest.raises(ValueError, match="^" + STEPS_BOUND.replace("(", r"\(")) as err:
        Chapter5Parameters(steps=value)
    assert "8 times make book's 60-minute budget" in str(err.value)


@pytest.mark.parametrize("value, expected", [(96, 96), (96.0, 96), (1e3, 1000),
                                             ("96,tiny-qwen3:1e3", "96,tiny-qwen3:1e3")])
def test_a_whole_number_of_steps_is_taken_however_written(value, expected):
    p = Chapter5Parameters(steps=value)
    assert p.steps == expected
    assert switch.parse_per_model("steps", p.steps, ["tiny-qwen3"])["tiny-qwen3"] in (96, 1000)


def test_the_declaration_and_the_study_read_lr_and_steps_alike():
    assert split_per_model("lr", "0.003,gemma3-270m:0.001") == (0.003, {"gemma3-270m": 0.001})
    assert split_per_model("steps", 64) == (64, {})
    with pytest.raises(ValueError, match="two defaults"):
        Chapter5Parameters(lr="0.1,0.2")
    with pytest.raises(ValueError, match="gemma3-270m is given twice"):
        Chapter5Parameters(lr="0.1,gemma3-270m:0.2,gemma3-270m:0.3")


def test_the_defaults_and_the_quick_profile_pass_the_early_checks():
    from kvutils.book.chapters import QUICK

    Chapter5Parameters(**QUICK["05_qwen3_switch"])
    Chapter4Parameters(**QUICK["04_cache_approximations"])
    Chapter1Parameters(**QUICK["01_cache_exactness"])
    assert Chapter5Parameters(k_values="L", patch_k=3).patch_k == 3  # L is a number only with the model
    Chapter4Parameters(frontier_models="", retrieval_models=" ")  # "" is none


def test_the_command_itself_exits_2_with_the_reason_first(tmp_path):
    """`python -m kvutils.build 05 --profile quick -p steps 1000000000`, as make chapter runs it."""
    done = subprocess.run([sys.executable, "-m", "kvutils.build", "05", "--profile", "quick",
                           "--results-dir", str(tmp_path), "-p", "steps", "1000000000"],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"python -m kvutils.build 05: {STEPS_BOUND}")
