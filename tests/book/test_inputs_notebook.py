"""Bad inputs stop a real notebook run (quick profile) in its first cell, within seconds and before
any model loads, naming the parameter."""
import pytest

from kvutils.core.catalog import NOTEBOOKS, PAGES


def test_a_results_dir_that_is_a_file_fails_in_the_first_cell_within_seconds(tmp_path):
    """End to end: the notebook stops in its validation cell, naming results_dir, before any model."""
    from conftest import failed_copy, run_failing_chapter

    (tmp_path / "results").write_text("not a folder")
    error, source = run_failing_chapter("01", tmp_path, {})
    assert "results_dir: " in error and "is a file, not a folder" in error
    assert "from_notebook" in source
    executed = failed_copy(tmp_path, NOTEBOOKS["01"])
    failed = next(c for c in executed["cells"] if any(o.get("output_type") == "error" for o in c.get("outputs", [])))
    # 10 s on an idle machine (importing torch is most of it), scaled when other work shares the cores
    busy = max(1.0, __import__("os").getloadavg()[0] / __import__("os").cpu_count())
    assert failed["metadata"]["papermill"]["duration"] < 10 * busy


@pytest.mark.parametrize("chapter, typo, closest", [("02", "batchsize", "batch_size"),
                                                    ("06", "near_exact", "near_exact_pct")])
def test_a_misspelt_parameter_stops_the_notebook_in_its_first_cell(tmp_path, chapter, typo, closest):
    import papermill
    from conftest import failed_copy

    from kvutils.book import chapters

    (tmp_path / "results").mkdir()
    with pytest.raises(papermill.PapermillExecutionError) as err:
        chapters.run_chapter(chapter, "quick", tmp_path / "results", tmp_path, {typo: 4})
    name = {**NOTEBOOKS, **PAGES}[chapter]
    executed = failed_copy(tmp_path, name)
    code = [c for c in executed["cells"] if c["cell_type"] == "code"]
    failed = [i for i, c in enumerate(code) if any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    first = next(i for i, c in enumerate(code) if "parameters" in c["metadata"].get("tags", []))
    assert failed == [first + 2]  # the parameters cell, papermill's injected cell, then the validation cell
    assert f"{typo}: not a parameter" in str(err.value) and f"did you mean {closest}?" in str(err.value)
    assert not list((tmp_path / "results").iterdir())


@pytest.mark.parametrize("log_output", [False, True], ids=["progress-bar", "log-output"])
def test_a_refusal_through_papermills_command_line_is_said_in_a_few_lines(tmp_path, log_output):
    """`python -m kvutils.rerun` (papermill's command line, as the README's examples run it) on
    chapter 1 with `-p n_prompts 0`: the reason, naming the parameter, in a few lines, no traceback
    (papermill's own printed 52 lines, the reason 4th and again at the end)."""
    import subprocess
    import sys

    from kvutils.core.paths import REPO_ROOT

    argv = [sys.executable, "-m", "kvutils.rerun", "notebooks/01_cache_exactness.ipynb", str(tmp_path / "out.ipynb"),
            "-p", "n_prompts", "0", "-p", "results_dir", str(tmp_path / "results"), *(["--log-output"] * log_output)]
    run = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in (run.stdout + run.stderr).replace("\r", "\n").splitlines()
             if line.strip() and not line.startswith("Executing:")]  # the progress bar's redraws
    reason = [i for i, line in enumerate(lines) if "n_prompts must be >= 1, got 0" in line]
    shown = "\n".join(lines)  # whole in a failure's message (a list's repr is cut short)
    assert run.returncode == 1 and reason, shown
    assert not any("Traceback" in line for line in lines), shown
    assert len(lines) <= (14 if log_output else 8), shown
