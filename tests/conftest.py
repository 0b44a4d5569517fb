"""Shared fixtures and helpers, and the kind of each test: the folder it lives in.

    tests/unit/    fast: tiny random models, pure functions, parameter checks (`pytest -m unit`)
    tests/signal/  the real trained models (smollm2-135m, gemma3-270m, minilm-l6) on real text
    tests/book/    chapter notebooks run end to end, the quick book built and read in Chromium,
                   command-line tools interrupted mid-run

Each test gets its folder's marker (declared in pyproject.toml); `slow` marks the tests that share
the quick book (every chapter run, then the book built: minutes) and those that take over ~20 s
alone (marked in their modules)."""
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import kvutils  # noqa: E402

# pytest-xdist's workers share the cores: each worker's torch, and the processes it starts, get
# their share. With torch's default (a thread per core) in each of two workers on two cores, OpenMP
# threads spin waiting for a core the other worker holds: tests/unit/test_step_batched.py took 5x
# the CPU time (114 s against 21 s) beside other work.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.setdefault("OMP_NUM_THREADS", _share)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

CAUSAL_TINY = ["tiny-neox", "tiny-llama", "tiny-qwen3", "tiny-qwen2", "tiny-gemma3"]
KINDS = ("unit", "signal", "book")
TESTS = Path(__file__).parent

# `make test` runs on both cores (pytest-xdist, --dist loadgroup). Tests that share the session's
# quick book (every chapter run once, then built) go to one worker, so the book is built once, not
# once per worker, and they come first: that worker's chain is the longest. Every other test runs on
# the worker of its module, in the module's order (some modules share a module-scoped fixture whose
# state a test changes, e.g. the explorer widget).
BOOK_FIXTURES = {"quick_chapters", "built_book", "site_report"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    quick_book = set()
    for item in items:
        kind = item.path.relative_to(TESTS).parts[0]
        if kind not in KINDS:
            raise pytest.UsageError(f"{item.nodeid}: a test lives in one of tests/{{{','.join(KINDS)}}}/")
        item.add_marker(kind)
        group = "quick_book" if BOOK_FIXTURES & set(getattr(item, "fixturenames", ())) else item.module.__name__
        item.add_marker(pytest.mark.xdist_group(group))
        if group == "quick_book":
            item.add_marker(pytest.mark.slow)
            quick_book.add(item)
        if getattr(config.option, "loadgroup", False):  # an xdist worker of --dist loadgroup
            _join_group(item, group)
    items.sort(key=lambda item: item not in quick_book)  # the quick book's tests first, the rest in their order


def _join_group(item, group: str) -> None:
    """xdist schedules a test by the `@group` that ends its id. xdist 3.8 appends it to `item._nodeid`,
    which pytest 9 no longer reads (its ids live in `item._id`), so without this every test would be
    scheduled alone: the quick book built on both workers, a module's tests split between them."""
    from _pytest.nodeid import NodeId

    node = item._id  # the suffix goes into its last name: an id rebuilt from its parts keeps it at the end
    if not str(node).endswith(f"@{group}"):
        last = node.names[-1] + (f"[{node.params}]" if node.params is not None else "")
        item._id = NodeId(path=node.path, names=(*node.names[:-1], f"{last}@{group}"))


_loaded = {}


def load_cached(name: str, dtype: str):
    """One instance per (model, dtype) for the whole session; tests must not modify it."""
    key = (name, dtype)
    if key not in _loaded:
        _loaded[key] = kvutils.load(name, dtype)
    return _loaded[key]


def states_of(name: str, attention: bool = False, keys: bool = True):
    """A model's states of the study words (data/senses.json) under both senses, as chapters 2 and 3
    compute them (kvutils.studies.sense_probes.probes.word_states); with `attention`, from a copy
    loaded with eager attention, which returns the attention weights."""
    from kvutils.core import data
    from kvutils.studies.sense_probes import probes

    loaded = load_cached(name, "float32") if not attention else _eager(name)
    items = probes.build_items(loaded.tokenizer, data.load_senses(), with_repeats=loaded.family == "causal")
    return probes.word_states(loaded, items, keys=keys, attention=attention, batch_size=16)


_eager_models = {}


def _eager(name):
    if name not in _eager_models:
        _eager_models[name] = kvutils.load(name, "float32", attn_implementation="eager")
    return _eager_models[name]


def bench_record(**changes) -> dict:
    """A results/bench.json record of round numbers; `section__key=value` changes one entry."""
    bench = {"model": "m", "load": {"first_load_s": 60.0, "cached_load_s": 2.0, "speedup": 30.0, "converts": True},
             "decode": {"kvutils_ms_per_token": 10.0, "generate_ms_per_token": 10.0, "ratio_kvutils_over_generate": 1.0},
             "recompute": {"one_pass_s": 1.0, "per_step_s": 10.0, "speedup": 10.0},
             "teacher": {"op": "window:size=128,sinks=4,reindex=false", "dtype": "float32", "fast_s": 1.0,
                         "step_s": 20.0, "speedup": 20.0, "max_logit_diff": 1e-5},
             "teacher_fp64": {"op": "quantize_naive:bits=4", "dtype": "float64", "fast_s": 1.0, "step_s": 20.0,
                              "speedup": 20.0, "max_logit_diff": 1e-13},
             "teacher_press": {"op": "snapkv:compression_ratio=0.5,window=32,kernel=5", "dtype": "float32", "fast_s": 1.0,
                               "step_s": 20.0, "speedup": 20.0, "max_logit_diff": 1e-6},
             "decode_policy": {"op": "tova:compression_ratio=0.5", "policy_step_s": 30.0, "exact_fast_s": 1.0,
                               "exact_step_s": 20.0, "over_exact_fast": 30.0, "over_exact_step": 1.5},
             "step_2000": {"context": 2000, "cached_ms": 100.0, "uncached_ms": 5000.0, "speedup": 50.0, "bound_ms": 50.0},
             "bandwidth_gb_s": 7.0,
             "switch": {"1": {"tail_patch_ms": 10.0, "recompute_ms": 100.0, "time_fraction": 0.1, "flops_fraction": 0.04}},
             "machine": {"cores": 2, "torch_threads": 2}, "wall_time_s": 100.0, "setup_s": 200.0}
    for path, value in changes.items():
        section, key = path.split("__")
        bench[section][key] = value
    return bench


@pytest.fixture
def text_prompts():
    """Real English prompts: the start of CPython's language reference sections."""
    from kvutils.core import data

    docs = data.load_corpus()

    def make(tokenizer, n: int, length: int) -> torch.Tensor:
        return data.prompts_from_corpus(tokenizer, docs, n, length)

    return make


def tracked_copy(root: Path) -> Path:
    """The repository's tracked files as they are in the working tree, copied into `root` (mtimes
    kept, so make's set-up stamp in the shared .venv stands), with that .venv: a fresh clone."""
    import shutil
    import subprocess

    from kvutils.core.paths import REPO_ROOT

    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    os.symlink(REPO_ROOT / ".venv", root / ".venv")
    return root


REPORT_COMMENT = "\n# a comment\n"  # what the quick book's clone adds to kvutils/report/names.py


@pytest.fixture(scope="session")
def quick_chapters(tmp_path_factory):
    """Every chapter executed once on the quick profile, then the benchmark on a tiny model (quick
    sizes) and the summary pages, each a job of make book's engine: (root, {chapter or page:
    executed notebook}), with a fresh clone of the working tree in root/clone, results in
    root/results, the jobs' log in root/build.log and the executed copies in root/book/chapters.

    It is built as a change confined to the report layer is (issue 49): the studies and the
    benchmark, with one page (chapter 2's), in the repository; then, in the clone, a comment added
    to kvutils/report/names.py and make's jobs again, timed, which render every page and compute no
    study. `make status` before and after the comment, and that last build's log and seconds, are
    kept in root/report_change.json (tests/book/test_page_only_changes.py reads them)."""
    import json
    import subprocess
    import time

    from kvutils.book import chapters
    from kvutils.core.paths import REPO_ROOT

    root = tmp_path_factory.mktemp("quick")
    clone = tracked_copy(root / "clone")
    results, out = root / "results", root / "book" / "chapters"
    log = root / "build.log"

    def make(*targets: str, cwd=clone) -> str:
        # as make book runs them: GNU make's jobs, two side by side, one thread each
        done = subprocess.run(["make", "--no-print-directory", "-j2", *targets, "PROFILE=quick", f"RESULTS={results}",
                               f"EXECUTED={out}", "JOB_THREADS=1"], cwd=cwd, capture_output=True, text=True,
                              timeout=1800)
        with log.open("a") as sink:
            sink.write(done.stdout + done.stderr)
        assert done.returncode == 0, log.read_text()[-5000:]
        return done.stdout

    # in the repository (its job records name its commit): every study and the benchmark, one page
    make("job-bench", "CHAPTER_PAGES=", cwd=REPO_ROOT)
    make("job-page-02", cwd=REPO_ROOT)
    before = make("status")
    names = clone / "kvutils" / "report" / "names.py"
    names.write_text(names.read_text() + REPORT_COMMENT)
    after = make("status")
    started = time.monotonic()
    build = make("jobs")
    (root / "report_change.json").write_text(json.dumps(
        {"status_before": before, "status_after": after, "log": build, "seconds": time.monotonic() - started}))
    executed = {ch: out / f"{name}.ipynb" for ch, name in {**chapters.NOTEBOOKS, **chapters.PAGES}.items()}
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
