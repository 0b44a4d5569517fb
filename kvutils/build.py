"""`python -m kvutils.build JOB`: one job of `make book` (kvutils.book.jobs), run only when its
inputs changed since its last record; GNU make (the Makefile) runs the jobs in order, on every core.

    python -m kvutils.build timing|retrieval-<model>|costs|01|02|03|04|05|bench [--profile full|quick]
        [--results-dir results] [--output-dir book/chapters] [--threads N] [-p NAME VALUE ...]
    python -m kvutils.build pages            # every stale page, side by side
    python -m kvutils.build page-NN -p ...   # one chapter's page, computing what its study lacks
    python -m kvutils.build status [--results-dir results]   # what the next build would rerun, and why
    python -m kvutils.build pages --if-ready   # the pages only if every job they read has run

A reused job prints one line naming the commit and date it was computed at; a computed one prints
why it ran. `-p` (a chapter's study or page) is recorded in the job's inputs, so the next build
without it computes the chapter again at its defaults.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvutils.build", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("job", help="a job of kvutils.book.jobs, 'pages' or 'status'")
    parser.add_argument("--profile", default="full", choices=["full", "quick"])
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--output-dir", default=None,
                        help="the executed notebooks (default: book/chapters for the book's results/, else "
                             "<results-dir>/pages)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads of the job (default: every core)")
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                        help="a chapter parameter (as papermill -p reads it)")
    parser.add_argument("--if-ready", action="store_true",
                        help="skip the job (with a line saying why) while a job it reads has no record yet: "
                             "`make chapter` on a fresh clone")
    return parser


def main(argv: list[str] | None = None) -> int:
    from kvutils.core import checks
    from kvutils.core.catalog import NOTEBOOKS
    from kvutils.core.params import papermill_value

    parser = _parser()
    checks.check_flags(parser, argv)
    args = parser.parse_args(argv)
    overrides = {key: papermill_value(raw) for key, raw in args.p}
    threads = args.threads or os.cpu_count() or 1
    job = None
    try:
        checks.check_int("--threads", threads, 1, 4096, "more threads than any machine's cores")
        if args.job != "status":
            from kvutils.book.jobs import check_job

            job = check_job(args.job, args.profile)
            if overrides and (job is None or job.kind == "bench" or job.name.removeprefix(
                "page-") not in NOTEBOOKS
                              and job.kind == "page"):
                raise ValueError(f"-p: only a chapter's study or page takes parameters, not {args.job!r}")
    except ValueError as err:
        parser.error(str(err))
    for variable in THREAD_VARIABLES:  # before torch loads, in this process and in a notebook's kernel
        os.environ[variable] = str(threads)
    from kvutils.book.chapters import page_dir

    try:  # the book's pages only from the book's results; a side run's beside its results
        args.output_dir = str(page_dir(args.results_dir, args.output_dir))
    except ValueError as err:
        print(f"{parser.prog} {args.job}: {err}", file=sys.stderr)
        return 2
    chapter = job.unit.chapter if job is not None and job.kind == "study" else args.job.removeprefix("page-")
    if chapter in NOTEBOOKS:  # its -p values, and room for its results, before any kernel starts
        from kvutils.book.chapters import check_overrides

        try:  # before any kernel starts: a wrong -p is one line (make chapter's PARAMS)
            check_overrides(chapter, args.profile, overrides,
                            str(Path(args.results_dir).expanduser().resolve()))
        except ValueError as err:
            print(f"{parser.prog} {args.job}: {err}", file=sys.stderr)
            return 2
    from kvutils.book import build_jobs

    if args.job == "status":
        return build_jobs.status(args.profile, args.results_dir, args.output_dir)
    from kvutils.book.chapters import report_failed_cell

    if args.if_ready and (missing := build_jobs.missing_inputs(args.job, args.profile, args.results_dir)):
        print(f"== job {args.job}: skipped: it reads jobs not run yet ({', '.join(missing)}); make book runs "
              "every one")
        return 0
    return report_failed_cell(lambda: build_jobs.run_job(args.job, args.profile, args.results_dir,
                                                         args.output_dir,
                                                          overrides, threads))


def cli(argv: list[str] | None = None) -> int:
    """Ctrl-C or a kill ends the job with one line; its results and record are as they were."""
    from kvutils.core.interrupt import run_cli

    return run_cli(main, argv, "this job left no record (it runs again next time); every earlier job's "
                   "results and records are as they were", children=True)


if __name__ == "__main__":
    sys.exit(cli())
