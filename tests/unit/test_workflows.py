"""The Pages workflow builds the book with the README's make targets and publishes it with the
standard actions, and it is a valid GitHub workflow (check-jsonschema's vendored github-workflows
schema: offline, no download)."""
import subprocess
import sys

import pytest
import yaml

from kvutils.core.paths import REPO_ROOT

WORKFLOWS = sorted((REPO_ROOT / ".github" / "workflows").glob("*.yml"))


def lint(path) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
            str(path)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_workflow_is_valid(path):
    result = lint(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_linter_refuses_a_broken_workflow(tmp_path):
    """The check can fail: a misspelt key (runs_on) is refused."""
    broken = tmp_path / "broken.yml"
    pages = (REPO_ROOT / ".github" / "workflows" / "pages.yml").read_text()
    broken.write_text(pages.replace("runs-on:", "runs_on:"))
    result = lint(broken)
    assert result.returncode != 0 and "runs_on" in result.stdout


def test_pages_builds_with_the_make_targets_and_deploys():
    flow = yaml.safe_load((REPO_ROOT / ".github" / "workflows" / "pages.yml").read_text())
    steps = flow["jobs"]["build"]["steps"]
    runs = [s["run"] for s in steps if "run" in s]
    assert runs == ["make book", "make dist"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert upload["with"]["path"] == "_build/html"
    deploy = flow["jobs"]["deploy"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert any(s.get("uses", "").startswith("actions/deploy-pages@") for s in deploy["steps"])
    assert flow["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
