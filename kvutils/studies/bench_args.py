"""Benchmark: ratios measured side by side in one run (never timed tests — these machines are noisy).

    python -m kvutils.bench [--model smollm2-135m] [--repeats 3] [--results-dir results] [--quick]

`--quick` (the tests, on a tiny model) shrinks every size; the book's appendix renders the full run.

Prints and writes results/bench.json:
- first load (GGUF -> safetensors conversion, in a fresh cache folder) vs a load from the cache;
- kvutils' cached greedy decoding vs transformers' own cached `generate`, per token;
- chapter 1's no-cache side: one full forward vs regenerating from scratch at every step;
- chapter 4's teacher-forced scoring: the fast path vs the step-by-step reference path, in fp32
  on a window that evicts while decoding, and on naive int4 in fp64 and fp32. Quantisation and
  casts are discontinuous: in fp32 a last-bit difference between the paths before quantising can
  move a value to the next level, so the two paths are compared for exactness in fp64; and on one
  prefill-time press (SnapKV at compression 0.5), whose kept set is fixed after the prefill;
- the step cost of one decode-time policy (TOVA at compression 0.5, which has only the step path):
  its scoring time against the exact cache's on the fast path and on the step path; and, with 8
  documents decoded together as the acceptance run does, its time per decoded token against the
  bandwidth bound of one cached step;
- one decode step with vs without the cache at 2,000 tokens of context, and the cached step
  against the memory-bandwidth bound (weight + cache bytes ÷ measured bandwidth);
- chapter 5's switch to a LoRA tail: tail patch vs full recompute of the prefix, per k;
- the wall time of every chapter, from its results file, where one exists, the set-up's (written
  by `make book` to results/setup_seconds.txt) and the benchmark's own.

(kvutils.studies.performance runs it; this module checks its arguments without torch: the flags,
the model key, the repeats, and --results-dir with the records the chapters left there, a damaged
one named, so that a typo costs no torch import.)
"""
from __future__ import annotations

import argparse
from pathlib import Path

from kvutils.core import checks, records, results
from kvutils.core.catalog import NOTEBOOKS
from kvutils.models.registry import EMBEDDED, TINY


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvutils.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="an embedded causal model key")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results-dir", default="results")
    parser.add_argument("--quick", action="store_true", help="small sizes (for the tests)")
    return parser


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, dict]:
    """The checked arguments and `earlier_records` of --results-dir; a bad one exits with status 2."""
    the_parser = parser()
    checks.check_flags(the_parser, argv)
    args = the_parser.parse_args(argv)
    causal = [k for k, e in {**EMBEDDED, **TINY}.items() if e.family == "causal"]
    if args.model not in causal:
        the_parser.error(f"--model: {args.model!r} is not an embedded or tiny causal model; choose one of "
                         f"{causal}")
    try:  # before torch loads
        checks.check_int("--repeats", args.repeats, 1, 1000, "each repeat times every measurement again")
        # "~/…" expanded
        args.results_dir = str(results.check_output(args.results_dir, "bench", "--results-dir"))
        earlier = earlier_records(args.results_dir)
    except ValueError as err:
        the_parser.error(str(err))
    return args, earlier


def chapter_times(results_dir: str | Path) -> dict:
    out = {}
    for name in NOTEBOOKS.values():
        path = results.results_path(results_dir, name)
        if path.is_file():
            out[name] = records.load_results(results_dir, name, "--results-dir")["wall_time_s"]
    return out


def job_records(results_dir: str | Path) -> dict:
    """The records of make book's jobs (kvutils.book.jobs) in the results folder, by job; a damaged
    one is an error naming it."""
    return {path.stem: records.load_record(path, "job", "--results-dir", "delete it or rerun make book")
            for path in sorted((Path(results_dir) / "jobs").glob("*.json"))}


def earlier_records(results_dir: str | Path) -> dict:
    """What `make book` recorded before the benchmark: each chapter's wall time and the set-up's."""
    out = {"chapter_wall_time_s": chapter_times(results_dir)}
    setup = Path(results_dir) / "setup_seconds.txt"
    if setup.is_file():
        text = setup.read_text(encoding="utf-8", errors="replace").strip()
        try:
            out["setup_s"] = float(text)
        except ValueError:
            raise ValueError(f"--results-dir: {setup} should hold the set-up's seconds, but holds "
                             f"{text[:40]!r}; delete it or rerun make book") from None
    return out
