"""Run the book's chapters with papermill: the full profile (the notebooks' own defaults) or the
quick profile (tiny models, small sizes) that the tests use.

    python -m kvutils.chapters 01 [--profile quick] [--results-dir results] [-p name value ...]

After the chapters it runs, it re-runs the summary pages (conclusions and appendices), which read
every chapter's results file and results/bench.json; they load no model and take seconds.
`python -m kvutils.chapters pages` runs only those.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from kvutils.core.catalog import NOTEBOOKS, PAGES
from kvutils.core.paths import REPO_ROOT

QUICK = {
    "01_cache_exactness": dict(models="tiny-llama,tiny-gemma3", n_prompts=4, prompt_tokens=16,
                               new_tokens=8, batch_size=4),
    "02_bert_contrast": dict(models="tiny-llama,tiny-gemma3", encoder="tiny-bert"),
    "03_sense_probes": dict(models="tiny-llama,tiny-gemma3", encoder="tiny-bert"),
    "04_cache_approximations": dict(
        models="tiny-llama,tiny-gemma3", table2_models="tiny-llama,tiny-gemma3", n_docs=2, prefill=64,
        # a list, as papermill's API passes one
        decode=32, chunk_decode=16, contexts=[32, 128], timing_repeats=2,
        ops=("exact; cast:dtype=bfloat16; quantize_naive:bits=4; quantize_kivi:bits=4,group=16,residual=16; "
             "window:size=16,sinks=4; window:size=16,sinks=0; window:size=16,sinks=4,reindex=true; "
             "chunk_reuse:positions=reindexed,chunk=32; chunk_reuse:positions=original,chunk=32; "
             "chunk_blend:recompute_fraction=0.15,chunk=32; chunk_blend:recompute_fraction=1.0,chunk=32"),
        frontier_models="tiny-llama,tiny-gemma3", frontier_docs=2, frontier_prefill=64, frontier_decode=32,
        # h2o / tova / the window at 48 entries: the mean a press at 0.5 holds over 64 + 32 tokens (32 + 15.5)
        frontier_ops=("exact; quantize_kivi:bits=2,group=16,residual=16; window:size=48,sinks=4; "
                      "random:compression_ratio=0.5; snapkv:compression_ratio=0.25,window=8; "
                      "snapkv:compression_ratio=0.5,window=8; adakv:compression_ratio=0.5,window=8; "
                      "pyramidkv:compression_ratio=0.5,window=8; "
                      "expected_attention:compression_ratio=0.5,future=64; h2o:compression_ratio=0.25; "
                      "tova:compression_ratio=0.25; hf_quantized:backend=fp8"),
        retrieval_models="tiny-llama", retrieval_contexts="128,160", retrieval_prompts=3, filler_prompts=3),
    "05_qwen3_switch": dict(models="tiny-qwen3", k_values="1,2,L", patch_k=2, rank=4, alpha=8, steps=3,
                            lr=0.003,
                            batch_size=8, n_train=16, n_heldout=8, passage_tokens=16, candidate_tokens=8,
                            patch_pairs=2, exact_examples=4, patch_layer_groups=2, bench_tokens=32,
                            timing_repeats=1),
}
EXECUTED_DIR = REPO_ROOT / "book" / "chapters"
BOOK_RESULTS = REPO_ROOT / "results"  # the results the book's pages are executed with
SIDE_PAGES = "pages"  # a side run's executed pages: <results_dir>/pages


def page_dir(results_dir: str | Path, output_dir: str | Path | None = None) -> Path:
    """Where a run's executed notebooks (the pages) go. The book's folder (book/chapters) holds the
    pages of the book's own results (results/ in the repository) only: a run whose results go
    elsewhere writes its pages beside them (<results_dir>/pages) where `output_dir` is not given,
    and may not name the book's folder, whose pages would then show results that are not the book's
    (and the next make book would compute them again)."""
    results = Path(results_dir).expanduser().resolve()
    if output_dir is None:
        return EXECUTED_DIR if results == BOOK_RESULTS.resolve() else results / SIDE_PAGES
    out = Path(output_dir).expanduser().resolve()
    if out == EXECUTED_DIR.resolve() and results != BOOK_RESULTS.resolve():
        raise ValueError(f"--output-dir: {output_dir} holds the book's pages, but this run's results go to "
                         f"{results_dir}, not the book's {BOOK_RESULTS.relative_to(REPO_ROOT)}/; leave "
                         f"--output-dir out (the pages then go to {results / SIDE_PAGES}) or give another "
                         "folder")
    return out


# beside the executed copies: ones being written, and failed ones (the book skips it)
UNFINISHED = ".unfinished"


def say(line: str) -> None:
    """One line of the build's log, written in one call: pages render side by side in threads, and
    print's two writes (the text, then its newline) can interleave with another thread's."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run_chapter(chapter: str, profile: str = "full", results_dir: str | Path = "results",
                output_dir: str | Path | None = None, parameters: dict | None = None) -> Path:
    """Execute one chapter notebook; return the executed copy's path. papermill writes the copy
    under <output_dir>/.unfinished/ and it replaces the page's copy only when every cell ran, so
    a failed or interrupted run leaves the previous page (which matches the previous results
    file). A failing cell raises papermill's PapermillExecutionError, noting the notebook, the
    cell and the failed copy (.unfinished/<name>.failed.ipynb). `output_dir`: see `page_dir`."""
    import papermill

    from kvutils.book.kernel import IpcKernelManager

    everything = {**NOTEBOOKS, **PAGES}
    if chapter not in everything:
        raise ValueError(f"chapter: {chapter!r} unknown; choose one of {', '.join(everything)}")
    if profile not in ("full", "quick"):
        raise ValueError(f"profile: {profile!r} unknown; choose 'full' or 'quick'")
    name = everything[chapter]
    params = dict(QUICK.get(name, {})) if profile == "quick" else {}
    params.update(parameters or {})
    params["results_dir"] = results_dir_as_given(Path(results_dir).expanduser().resolve())
    output_dir = page_dir(results_dir, output_dir)
    output = output_dir / f"{name}.ipynb"
    unfinished = output_dir / UNFINISHED
    unfinished.mkdir(parents=True, exist_ok=True)
    _remove_orphans(unfinished)
    running = unfinished / f"{name}.{os.getpid()}.ipynb"
    failed = unfinished / f"{name}.failed.ipynb"
    say(f"== chapter {chapter} ({name}, {profile} profile) ...")
    started = time.time()
    try:
        papermill.execute_notebook(REPO_ROOT / "notebooks" / f"{name}.ipynb", running, parameters=params,
                                   cwd=REPO_ROOT, kernel_name="python3", progress_bar=False,
                                   log_output=True, kernel_manager_class=IpcKernelManager)
        for_the_page(running, profile)
        os.replace(running, output)
    except papermill.PapermillExecutionError as err:
        if running.exists() and err.ename != "KeyboardInterrupt":  # an interrupted copy is of no use
            os.replace(running, failed)
        first_line = next((line for line in err.source.splitlines() if line.strip()), "")
        err.add_note(f"chapter {chapter}: notebooks/{name}.ipynb failed in cell {err.cell_index} "
                     f"(In [{err.exec_count}]: {first_line!r}) with {err.ename}: {err.evalue}; "
                     f"the executed copy, error included, is {failed}; the page's copy {output} is as it was")
        raise
    finally:
        running.unlink(missing_ok=True)
    failed.unlink(missing_ok=True)
    say(f"== chapter {chapter} done in {time.time() - started:.0f} s -> {output}")
    return output


def _remove_orphans(unfinished: Path) -> None:
    """Delete executed copies whose runner was killed (SIGKILL leaves its copy behind)."""
    from kvutils.core.results import writer_alive

    for copy in unfinished.glob("*.*.ipynb"):
        pid = copy.suffixes[-2].lstrip(".")
        if pid.isdigit() and not writer_alive(int(pid), copy):
            copy.unlink(missing_ok=True)


# a cell's own choice
SHOWN_OR_GONE = ("remove-cell", "remove-input", "hide-input", "hide-cell", "show-input")


# the warning at the top of every page the quick profile builds (after the page's title)
QUICK_BANNER = ("```{warning}\nQuick profile (`make book PROFILE=quick`): this page was built from tiny "
                "models with random weights, at small sizes. Its numbers, tables and figures show the shape "
                "of the page, not the book's findings; `make book` builds it from the real models.\n```")
QUICK_TAG = "quick-profile"


def for_the_page(notebook: Path, profile: str = "full") -> None:
    """The executed copy as the page shows it (a copy under .unfinished/, not yet the page's):
    - on the quick profile, QUICK_BANNER right after the page's title cell, so no page of a quick
      book can pass for the book's results;
    - no stored ipywidgets state: the book is static, and that state would make its pages load the
      widget manager from a CDN (the live controls need a kernel anyway);
    - every code cell's input collapsed behind the theme's "show code" toggle ("hide-input"), unless
      the cell chose otherwise: a page opens with its text and results, not with its parameters
      and plumbing, and the code stays one click away;
    - papermill's injected cell without its `results_dir` line (a path of the machine that built
      the page, not a parameter of the result), and gone where nothing else was injected."""
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if "injected-parameters" in cell.metadata.get("tags", []):
            lines = [line for line in cell.source.splitlines() if not line.startswith("results_dir = ")]
            cell.source = "\n".join(lines)
            if not any(line.strip() and not line.startswith("#") for line in lines):
                cell.metadata["tags"] = [*cell.metadata["tags"], "remove-cell"]
    for cell in nb.cells:
        if cell.cell_type == "code" and not set(cell.metadata.get("tags", [])) & set(SHOWN_OR_GONE):
            cell.metadata["tags"] = [*cell.metadata.get("tags", []), "hide-input"]
    if profile == "quick" and not any(QUICK_TAG in c.metadata.get("tags", []) for c in nb.cells):
        title = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
        banner = nbformat.v4.new_markdown_cell(QUICK_BANNER, metadata={"tags": [QUICK_TAG]})
        nb.cells.insert(title + 1, banner)
    nbformat.write(nb, notebook)


def pages_dir(results_dir: str | Path) -> Path:
    """Where a run's executed notebooks go by default: the book's pages (book/chapters/) for the
    book's results folder (results/), and <results_dir>/pages/ for any other, so that a side run
    never replaces a page of the book with pages of results the book does not hold."""
    results_dir = Path(results_dir).expanduser().resolve()
    return EXECUTED_DIR if results_dir == (REPO_ROOT / "results").resolve() else results_dir / "pages"


def results_dir_as_given(results_dir: Path) -> str:
    """The results folder the notebook is given: "./" and its path in the repository (the kernel's
    working folder) where it lies inside it, so no page shows this machine's path; absolute
    elsewhere. Never the bare default "results": given explicitly, it is kept even with other
    parameters changed (`kvutils.core.params.run_folder`), as `make chapter` needs."""
    try:
        return f"./{results_dir.relative_to(REPO_ROOT).as_posix()}"
    except ValueError:
        return str(results_dir)


def _check_pages_inputs(results_dir: str, running: list[str]) -> None:
    """The summary pages read every chapter's results and bench.json: say now, before any chapter
    runs, if some would still be missing after this run's chapters."""
    from kvutils.core.results import results_path

    missing = [f"{name}.json" for n, name in NOTEBOOKS.items()
               if n not in running and not results_path(results_dir, name).is_file()]
    missing += [] if (Path(results_dir) / "bench.json").is_file() else ["bench.json"]
    if missing:
        raise ValueError(f"--results-dir: the summary pages need {', '.join(missing)} in {results_dir}, "
                         "which this run does not write; run make book first, or pass --no-pages")


def check_overrides(chapter: str, profile: str, overrides: dict, results_dir: str) -> None:
    """A chapter's `-p` names and values, each checked as the notebook's first cell checks it, and
    its results folder, before a kernel starts (ValueError naming the parameter)."""
    from kvutils.core import results
    from kvutils.studies.parameters import DECLARED

    declared = DECLARED[NOTEBOOKS[chapter]]
    declared.check_names(overrides)
    given = {**(QUICK.get(NOTEBOOKS[chapter], {}) if profile == "quick" else {}), **overrides}
    declared(**{name: value for name, value in given.items() if name != "results_dir"})
    results.check_output(results_dir, NOTEBOOKS[chapter], "--results-dir")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kvutils.chapters", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", default=list(NOTEBOOKS),
                        help="e.g. 01 (default: all); 'pages' runs only the summary pages")
    parser.add_argument("--profile", default="full", choices=["full", "quick"])
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--output-dir", default=None,
                        help="the executed notebooks (default: book/chapters for the book's results/, else "
                             "<results-dir>/pages)")
    parser.add_argument("--no-pages", action="store_true", help="do not re-run the summary pages afterwards")
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="override a notebook parameter (as papermill -p)")
    from kvutils.core import checks

    checks.check_flags(parser, argv)
    args = parser.parse_args(argv)
    if args.results_dir.strip():  # "" stays an error
        args.results_dir = str(Path(args.results_dir).expanduser())
    if args.output_dir is not None and args.output_dir.strip():
        args.output_dir = str(Path(args.output_dir).expanduser())
    from kvutils.core.params import papermill_value

    overrides = {key: papermill_value(raw) for key, raw in args.p}  # as `papermill -p` reads them
    unknown = [c for c in args.chapters if c not in {**NOTEBOOKS, **PAGES} and c != "pages"]
    if unknown:
        parser.error(f"chapters: {', '.join(map(repr, unknown))} unknown; choose from "
                     f"{', '.join([*NOTEBOOKS, *PAGES])} or 'pages'")
    chapters = [c for c in args.chapters if c not in PAGES and c != "pages"]
    try:  # parameter names and output folders, before any kernel starts or model loads
        from kvutils.core import results

        if not args.results_dir.strip():  # refused below, by its own name
            args.output_dir = args.output_dir or str(EXECUTED_DIR)
        elif args.output_dir is None or args.output_dir.strip():  # "" stays an error, said by check_folder
            args.output_dir = str(page_dir(args.results_dir, args.output_dir))
        for chapter in chapters:
            check_overrides(chapter, args.profile, overrides, args.results_dir)
        results.check_folder(args.output_dir, "--output-dir")  # after --results-dir, which it may lie in
        if not chapters and not (args.results_dir.strip() and Path(args.results_dir).is_dir()):
            raise ValueError(f"--results-dir: {args.results_dir!r} is not a folder; the summary pages read "
                             "the chapters' results from it (make book writes them to results/)")
        if not args.no_pages:
            _check_pages_inputs(args.results_dir, chapters)
    except ValueError as err:
        parser.error(str(err))
    for chapter in chapters:
        run_chapter(chapter, args.profile, args.results_dir, args.output_dir, overrides)
    for page in [] if args.no_pages else PAGES:
        run_chapter(page, args.profile, args.results_dir, args.output_dir)


def report_failed_cell(run) -> int | None:
    """`run()`'s result; a chapter's failed cell (papermill's error) is printed as its own error, its
    cell and its executed copy (run_chapter's note) and gives 1, since the runner's traceback would
    only show papermill's internals; a Ctrl-C that reached the kernel mid-cell is an interruption."""
    try:
        return run()
    except Exception as err:
        import papermill

        if not isinstance(err, papermill.PapermillExecutionError):
            raise
        if err.ename == "KeyboardInterrupt":
            raise KeyboardInterrupt from None
        print("\n".join(getattr(err, "__notes__", [])) or f"{err.ename}: {err.evalue}", file=sys.stderr)
        return 1


def cli(argv: list[str] | None = None) -> int:
    """`main`, with Ctrl-C or SIGTERM answered by one line (kvutils.core.interrupt): each results file
    and each page's executed copy is replaced as one unit, so an interrupted chapter leaves the
    previous ones as they were."""
    from kvutils.core.interrupt import run_cli

    def main_interruptible(args: list[str] | None) -> int:
        return report_failed_cell(lambda: main(args)) or 0  # checks every argument before papermill or torch

    return run_cli(main_interruptible, argv, "every results file and page is as it was before the "
                   "interrupted chapter", children=True)


if __name__ == "__main__":
    sys.exit(cli())
