"""Compare every number of two results folders, ignoring what a rerun changes by nature (times,
dates, the machine, the commit, figure hashes): the proof that a refactor changed no result.

    python -m kvutils.results_diff results-before results-after [--rtol 1e-9]

Exit status 0 when every compared value matches, 1 otherwise (each difference printed with its
path, e.g. `04_cache_approximations.json: numbers.table2.smollm2-135m.plain.ops.exact.mean_kl`).
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path

# a path component matching this is a time, a date or a property of the run, not a result
VOLATILE = re.compile(
    r"(^|_)(seconds|secs?|ms|time|times|timing|timings|wall_time_s|elapsed|finished|started|"
    r"git_commit|machine|versions|packages|sha256|figures|bandwidth(_gb_s)?|speedup|speed_up|"
    r"throughput|per_s|tokens_per_s|speedups|results_dir)($|_)|_s$|_ms$"
    r"|^(over_bound|over_exact_fast|over_exact_step|ratio_kvutils_over_generate)$")  # ratios of two timings


def _leaves(value, path: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]")
    else:
        yield path, value


def volatile(path: str) -> bool:
    parts = re.split(r"[.\[\]]", path)
    return any(VOLATILE.search(part) for part in parts if part)


def _same(a, b, rtol: float) -> bool:
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) \
            or not isinstance(b, (int, float)):
        return a == b
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=rtol, abs_tol=0.0)


def diff(before: dict, after: dict, rtol: float = 0.0) -> list[str]:
    """Every non-volatile leaf that differs, is missing or was added, one line each."""
    old = {p: v for p, v in _leaves(before) if not volatile(p)}
    new = {p: v for p, v in _leaves(after) if not volatile(p)}
    lines = [f"{p}: {old[p]!r} -> {new[p]!r}" for p in old if p in new and not _same(old[p], new[p], rtol)]
    lines += [f"{p}: only before" for p in old if p not in new]
    lines += [f"{p}: only after" for p in new if p not in old]
    return lines


def diff_folders(before: Path, after: Path, rtol: float = 0.0) -> list[str]:
    out = []
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    if not names:
        raise ValueError(f"no results files (*.json) in {before} or {after}")
    for name in names:
        a, b = before / name, after / name
        if not a.exists() or not b.exists():
            out.append(f"{name}: only in {'after' if not a.exists() else 'before'}")
            continue
        out += [f"{name}: {line}" for line in diff(json.loads(a.read_text()), json.loads(b.read_text()),
                                                   rtol)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvutils.results_diff",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="results folder of the earlier run")
    parser.add_argument("after", type=Path, help="results folder of the later run")
    parser.add_argument("--rtol", type=float, default=0.0, help="relative tolerance (default: 0, exact)")
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            parser.error(f"{folder}: not a folder")
    lines = diff_folders(args.before, args.after, args.rtol)
    print("\n".join(lines) if lines else "every compared number is the same")
    return 1 if lines else 0


cli = main  # `python -m kvutils.results_diff` and `kvutils-results-diff`


if __name__ == "__main__":
    sys.exit(main())
