"""The README's first lines are what the committed full build found (rendered, never typed), its
chapter times are that build's, and each of its example commands writes a file of its own."""
import gzip
import json
import re
import shlex

import pytest

from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.paths import REPO_ROOT
from kvutils.report import readme_findings
from kvutils.report.text import fmt

README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def full_build(name: str) -> dict:
    return json.loads(gzip.decompress((readme_findings.FULL_BUILD / f"{name}.json.gz").read_bytes()))


@pytest.fixture(scope="module")
def findings_block():
    return readme_findings.render("findings")


def test_the_readme_opens_with_the_findings_of_the_full_build(findings_block):
    """Right after the title, at most five lines, equal to what tests/data/full_build renders
    (`python -m kvutils.report.readme_findings --write` rewrites them after a new full build)."""
    assert readme_findings.readme_block(README, "findings") == findings_block
    lines = README.splitlines()
    assert lines[0].startswith("# ") and lines[2] == readme_findings.markers("findings")[0]
    body = findings_block.splitlines()[1:-1]
    assert 1 <= len(body) <= readme_findings.MAX_LINES
    ch4 = full_build("04_cache_approximations")  # read here directly, not through the module
    ops = next(iter(ch4["numbers"]["table2"].values()))["plain"]["ops"]
    assert ch4["git_commit"][:7] in body[-1]
    f16, worst = ops["cast:dtype=float16"], min(o["top1_agreement_pct"] for o in ops.values())
    assert f"best float16 cache ({fmt(f16['top1_agreement_pct'], 4)} %)" in body[1]
    assert f"worst naive 2-bit, {fmt(worst, 3)} %" in body[1] and "guide" in body[1]


def test_each_readme_finding_is_a_bold_claim_and_one_short_sentence(findings_block):
    """A claim a reader can repeat, then about 25 words with its numbers: no list of methods."""
    for line in findings_block.splitlines()[1:-2]:
        claim, _, rest = line.removeprefix("- **").partition("**")
        assert claim.endswith(".") and rest, line
        words = [w for w in rest.split() if any(c.isalnum() for c in w)]  # '%' and '=' are no words
        assert len(words) <= 28, (len(words), line)
        assert rest.count(";") <= 1 and rest.count(",") <= 4, line


def test_the_chapter_times_are_the_full_builds():
    block = readme_findings.render("chapter-times")
    assert readme_findings.readme_block(README, "chapter-times") == block
    assert all(f"make chapter N={n}" in block for n in NOTEBOOKS)
    ch5 = full_build("05_qwen3_switch")
    assert f"| `make chapter N=05` (05_qwen3_switch) | {ch5['wall_time_s']:,.0f} s | " in block


def test_a_block_without_its_markers_is_refused():
    with pytest.raises(ValueError, match="findings"):
        readme_findings.replace_block("# title\n", "findings", "x")
    text = "# title\n"
    begin, end = readme_findings.markers("findings")
    new = readme_findings.replace_block(f"{text}{begin}\nold\n{end}\nz", "findings", "NEW")
    assert new == f"{text}NEW\nz"


def example_commands(readme: str) -> list[list[str]]:
    """The shell commands of the README's bash blocks, continuation lines joined."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", readme, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("&&")[-1].strip()
            if line and not line.startswith("#"):
                commands.append(shlex.split(line, comments=True))
    return commands


def written_file(argv: list[str]) -> str | None:
    """The file an example command writes: papermill's output notebook, accept's --out, or the page
    `make chapter N=..` replaces."""
    if argv[:3] == ["python", "-m", "kvutils.rerun"] or argv[0] == "papermill":
        return [a for a in argv[1:] if a.endswith(".ipynb")][1]
    if "kvutils.accept" in argv:
        return argv[argv.index("--out") + 1]
    if argv[:2] == ["make", "chapter"]:
        n = next(a for a in argv if a.startswith("N=")).removeprefix("N=")
        return f"book/chapters/{NOTEBOOKS[n]}.ipynb"
    return None


def test_every_example_command_writes_its_own_file():
    """Two papermill examples once wrote the same runs/01_cache_exactness.ipynb: the failed one
    replaced the good run."""
    written = [f for f in map(written_file, example_commands(README)) if f]
    assert len(written) >= 5, written
    assert len(set(written)) == len(written), written
    assert sum(f.startswith("runs/") for f in written) >= 4


def test_the_readme_shows_the_passkey_command_whole_and_progress_for_papermill():
    commands = example_commands(README)
    passkey = [c for c in commands if "passkey" in c]
    assert passkey and "--haystack" in passkey[0] and "--out" in passkey[0]
    papermill = [c for c in commands if c[:3] == ["python", "-m", "kvutils.rerun"]]
    assert papermill and all("--log-output" in c for c in papermill)
    assert "PROFILE=quick" in README and "LAB_ARGS" in README and "make dist" in README
    assert README.index("make chapter N=01") < README.index("kvutils.rerun")  # make chapter first


def test_a_new_notebook_from_make_lab_lands_in_notebooks_and_is_ignored():
    """`make lab` opens in notebooks/ (JupyterLab's launcher creates there), and an Untitled*.ipynb
    anywhere is ignored by git, so it never shows as untracked in the repository's root."""
    import subprocess

    lab = subprocess.run(["make", "-n", "lab"], cwd=REPO_ROOT, capture_output=True, text=True).stdout
    assert "--FileContentsManager.preferred_dir=notebooks" in lab
    for path in ("Untitled.ipynb", "Untitled3.ipynb", "notebooks/Untitled1.ipynb"):
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO_ROOT).returncode == 0, path
    assert subprocess.run(["git", "check-ignore", "-q", "notebooks/01_cache_exactness.ipynb"],
                          cwd=REPO_ROOT).returncode == 1
