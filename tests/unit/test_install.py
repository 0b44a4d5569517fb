"""A non-editable install (`pip install .`): kvutils imports anywhere, and reads its repository's
files only from a checkout it is pointed at (KVUTILS_REPO), failing clearly without one."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from kvutils.core.paths import REPO_ENV, REPO_ROOT


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """kvutils installed with pip (not editable) into a folder of its own, from a copy of the sources
    (so that the build leaves nothing in the checkout); offline, without dependencies."""
    root = tmp_path_factory.mktemp("install")
    source, site = root / "source", root / "site"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, source / name)
    shutil.copytree(REPO_ROOT / "kvutils", source / "kvutils", ignore=shutil.ignore_patterns("__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                            "--quiet", "--disable-pip-version-check", "--target", str(site), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return site


def run_installed(site, cwd, code: str, repo: str | None = None) -> subprocess.CompletedProcess:
    """`code` in a fresh Python that finds kvutils only in `site`, from `cwd`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", REPO_ENV)}
    env["PYTHONPATH"] = str(site)
    if repo is not None:
        env[REPO_ENV] = repo
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_the_install_holds_every_module_and_the_explorer_script(site):
    modules = {p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "kvutils").rglob("*.py")}
    installed = {p.relative_to(site).as_posix() for p in (site / "kvutils").rglob("*.py")}
    assert modules == installed
    assert (site / "kvutils" / "explorer" / "explorer.js").read_bytes() == \
        (REPO_ROOT / "kvutils" / "explorer" / "explorer.js").read_bytes()


def test_kvutils_imports_outside_a_checkout_without_torch(site, tmp_path):
    code = ("import sys, kvutils, kvutils.core.article, kvutils.core.results\n"
            "print(kvutils.__file__)\n"
            "print('torch' in sys.modules)\n"
            "print(kvutils.core.results.git_commit())")
    done = run_installed(site, tmp_path, code)
    assert done.returncode == 0, done.stderr[-3000:]
    where, torch_loaded, commit = done.stdout.split()
    assert where == str(site / "kvutils" / "__init__.py")  # not the checkout's copy
    assert torch_loaded == "False"
    assert commit == "unknown"  # no checkout, so no commit to record


def test_reading_a_repository_file_outside_a_checkout_says_how_to_fix_it(site, tmp_path):
    code = "from kvutils.core.article import article\narticle()"
    done = run_installed(site, tmp_path, code)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("kvutils.core.paths.RepositoryNotFound: kvutils needs data/article_figures.json")
    assert "pip install -e ." in last and f"set {REPO_ENV}" in last and str(site / "kvutils") in last


def test_a_relative_data_path_outside_a_checkout_names_the_working_directory(site, tmp_path):
    code = "from kvutils.core.paths import resolve_path\nresolve_path('data/senses.json')"
    done = run_installed(site, tmp_path, code)
    last = done.stderr.strip().splitlines()[-1]
    assert f"kvutils needs data/senses.json (it is not in the working directory, {tmp_path})" in last


def test_kvutils_repo_that_is_no_checkout_is_named(site, tmp_path):
    code = "from kvutils.core.article import article\narticle()"
    done = run_installed(site, tmp_path, code, repo=str(tmp_path))
    last = done.stderr.strip().splitlines()[-1]
    assert f"{REPO_ENV}={tmp_path} is not a checkout" in last and "data/ and notebooks/" in last


def test_kvutils_repo_points_an_installed_copy_at_a_checkout(site, tmp_path):
    code = ("import json\nfrom kvutils.core.article import article\nfrom kvutils.core.paths import REPO_ROOT\n"
            "print(REPO_ROOT)\nprint(json.dumps(article()))")
    done = run_installed(site, tmp_path, code, repo=str(REPO_ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    root, figures = done.stdout.split("\n", 1)
    assert root == str(REPO_ROOT)
    assert json.loads(figures) == json.loads((REPO_ROOT / "data" / "article_figures.json").read_text())
