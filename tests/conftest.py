import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import kvutils  # noqa: E402

CAUSAL_TINY = ["tiny-neox", "tiny-llama", "tiny-qwen3", "tiny-gemma3"]

# `make test` runs on both cores (pytest-xdist, --dist loadgroup). Tests that share the session's
# quick book (every chapter run once, then built) go to one worker, so the book is built once, not
# once per worker; every other test runs on the worker of its module, in the module's order (some
# modules share a module-scoped fixture whose state a test changes, e.g. the explorer widget).
BOOK_FIXTURES = {"quick_chapters", "built_book", "site_report"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if BOOK_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.xdist_group("quick_book"))
            item.add_marker(pytest.mark.slow)
        else:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))

_loaded = {}


def load_cached(name: str, dtype: str):
    """One instance per (model, dtype) for the whole session; tests must not modify it."""
    key = (name, dtype)
    if key not in _loaded:
        _loaded[key] = kvutils.load(name, dtype)
    return _loaded[key]


@pytest.fixture
def text_prompts():
    """Real English prompts: the start of CPython's language reference sections."""
    from kvutils.core import data

    docs = data.load_corpus()

    def make(tokenizer, n: int, length: int) -> torch.Tensor:
        return data.prompts_from_corpus(tokenizer, docs, n, length)

    return make


@pytest.fixture(scope="session")
def quick_chapters(tmp_path_factory):
    """Every chapter executed once on the quick profile, then the benchmark on a tiny model (quick
    sizes) and the summary pages: (root, {chapter or page: executed notebook}), with results in
    root/results and the executed copies in root/book/chapters."""
    from kvutils.book import chapters
    from kvutils.studies import performance as bench

    root = tmp_path_factory.mktemp("quick")
    results, out = root / "results", root / "book" / "chapters"
    chapters.run_lanes(chapters.LANES, "quick", str(results), str(out))  # as make book runs them
    executed = {ch: out / f"{name}.ipynb" for ch, name in chapters.NOTEBOOKS.items()}
    bench.main(["--model", "tiny-llama", "--repeats", "1", "--quick", "--results-dir", str(results)])
    executed.update({page: chapters.run_chapter(page, "quick", results, out) for page in chapters.PAGES})
    return root, executed


@pytest.fixture(scope="session")
def built_book(quick_chapters, tmp_path_factory):
    """The book built (-W) from the quick run's executed notebooks: (root of the quick run, html folder)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    from kvutils.core.paths import REPO_ROOT

    root, executed = quick_chapters
    site = tmp_path_factory.mktemp("book")
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(REPO_ROOT / name, site / name)
    shutil.copytree(REPO_ROOT / "book", site / "book", ignore=shutil.ignore_patterns("chapters"))
    (site / "book" / "chapters").mkdir()
    for notebook in executed.values():
        shutil.copy(notebook, site / "book" / "chapters")
    jb = [str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "--keep-going", str(site)]
    build = subprocess.run(jb, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return root, site / "_build" / "html"


@pytest.fixture
def no_model_loads(monkeypatch):
    """Fail the test if validation loads a model: `kvutils.models.loading.load` and every kvutils module's
    imported reference to it are replaced."""
    import sys

    from kvutils.models import loading as models

    def fail(*args, **kwargs):
        pytest.fail("a model loaded during validation")

    real = models.load
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "kvutils" and getattr(module, "load", None) is real:
            monkeypatch.setattr(module, "load", fail)


def failed_copy(output_dir, notebook: str) -> dict:
    """The executed copy of a chapter that failed, which kvutils.book.chapters keeps aside; the page's
    own copy (none in a test's fresh folder) is left as it was."""
    import json

    from kvutils.book import chapters

    assert not (output_dir / f"{notebook}.ipynb").exists()
    return json.loads((output_dir / chapters.UNFINISHED / f"{notebook}.failed.ipynb").read_text())


def run_failing_chapter(chapter: str, tmp_path, overrides: dict) -> tuple[str, str]:
    """Run a chapter on the quick profile that must fail; return (the error, the source of the one
    cell that failed), so a test can check it stopped in its validation cell."""

    import papermill

    from kvutils.book import chapters

    with pytest.raises(papermill.PapermillExecutionError) as err:
        chapters.run_chapter(chapter, "quick", tmp_path / "results", tmp_path, overrides)
    executed = failed_copy(tmp_path, chapters.NOTEBOOKS[chapter])
    failed = [c for c in executed["cells"] if c["cell_type"] == "code"
              and any(o.get("output_type") == "error" for o in c.get("outputs", []))]
    assert len(failed) == 1, f"{len(failed)} cells failed"
    note = " ".join(getattr(err.value, "__notes__", []))  # what make book prints: the notebook and the cell
    assert f"notebooks/{chapters.NOTEBOOKS[chapter]}.ipynb failed in cell" in note, note
    return str(err.value), "".join(failed[0]["source"])
