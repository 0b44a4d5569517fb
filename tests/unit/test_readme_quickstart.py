"""The README's quick start, read as a reader types it: every command of its code blocks names a
make target that exists, a chapter and parameters its notebook accepts (each -p checked as the
notebook's first cell checks it, before any model loads), or the acceptance test's flags as its
parser reads them. Running them is the book's and the other tests' job (`make chapter` from a
fresh clone in tests/book/test_make_chapter.py, papermill's command line in test_rerun_commands.py)."""
import re
import shlex
import subprocess

import pytest

from kvutils.book.chapters import check_overrides
from kvutils.core import params
from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.paths import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()


def _commands() -> list[str]:
    """The commands of the README's bash blocks, continuation lines joined, comments cut."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                out += [part.strip() for part in line.split("&&")]
    return out


COMMANDS = _commands()


def test_the_quick_start_has_the_commands_a_reader_needs():
    heads = {c.split()[0] + (" " + c.split()[1] if c.startswith("make") else "") for c in COMMANDS}
    assert {"make book", "make test", "make setup", "make chapter"} <= heads, heads
    assert any("papermill" in c or "kvutils.rerun" in c for c in COMMANDS)  # a rerun beside the book
    assert any("kvutils.accept" in c for c in COMMANDS)


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("make ")])
def test_each_make_command_names_a_target_the_makefile_has(command):
    target = shlex.split(command)[1]
    done = subprocess.run(["make", "-q", "-f", "Makefile", target], cwd=REPO_ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "MAKEFLAGS": ""}, timeout=60)
    assert "No rule to make target" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("make chapter")])
def test_make_chapters_parameters_pass_the_notebooks_checks(command):
    words = dict(w.split("=", 1) for w in shlex.split(command)[2:])
    overrides = {name: params.papermill_value(value) for name, value in re.findall(r"-p (\w+) (\S+)", words["PARAMS"])}
    check_overrides(words["N"], "full", overrides, "results")  # ValueError naming the parameter if refused


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.startswith("papermill ")])
def test_each_papermill_rerun_passes_its_notebooks_checks(command):
    notebook = re.search(r"notebooks/(\w+)\.ipynb", command).group(1)
    chapter = next(n for n, name in NOTEBOOKS.items() if name == notebook)
    overrides = {name: params.papermill_value(value) for name, value in re.findall(r"-p (\w+) (\S+)", command)}
    check_overrides(chapter, "full", overrides, "results")


def test_the_acceptance_command_parses_as_its_cli_reads_it(tmp_path):
    """The reader's own text folder stands where the README writes its placeholder path."""
    from kvutils.cache.accept_args import parse

    command = next(c for c in COMMANDS if "kvutils.accept" in c)
    argv = shlex.split(command)[3:]  # after ".venv/bin/python -m kvutils.accept"
    docs = argv.index("--docs") + 1
    assert argv[docs].startswith("path/to/")  # a placeholder the reader replaces
    (tmp_path / "a.txt").write_text("Some text of the reader's own. " * 50)
    argv[docs] = str(tmp_path)
    argv[argv.index("--out") + 1] = str(tmp_path / "accept.json")
    _, args = parse(argv)
    assert args.model == "smollm2-135m" and len(args.ops) == 2


def test_the_readmes_screenshot_of_the_explorer_is_in_the_repository():
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", README)
    assert any("explorer" in i for i in images), images
    assert all((REPO_ROOT / i).is_file() for i in images), images
