"""The one loader of a build's results files: each is read, checked against its format
(`kvutils.core.schema`) and returned typed, or refused with an error naming it and what to run.
The summary pages, the chapters' pages, the benchmark and chapter 4's decode timings read results
only through here."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

from kvutils.core import schema
from kvutils.core.paths import resolve_path
from kvutils.core.results import recover, results_path


class Record(TypedDict):
    """A chapter's results file (`save_run`); `numbers` follows the chapter's schema
    (`kvutils.core.schema`)."""

    chapter: str
    parameters: dict[str, Any]
    models: list[dict[str, Any]]
    numbers: dict[str, Any]
    figures: dict[str, dict[str, str]]
    wall_time_s: float
    finished: str
    git_commit: str
    packages: dict[str, str]
    machine: dict[str, Any]


def load_results(results_dir: str | Path, chapter: str, parameter: str = "results_dir") -> Record:
    """A chapter's results record, checked against its format (`kvutils.core.schema`); a missing,
    unreadable, malformed or differently shaped file is an error naming it."""
    path = resolve_path(results_path(results_dir, chapter))
    recover(path.parent)
    record = load_json(path, parameter, f"rerun chapter {chapter}", f"run chapter {chapter} first")
    if not isinstance(record, dict) or not isinstance(record.get("numbers"), dict):
        raise ValueError(f"{parameter}: {path} is not a chapter results file (no \"numbers\" object); "
                         f"rerun chapter {chapter}")
    if schema.has_schema(chapter):
        schema.check(record, chapter, path, parameter, f"rerun chapter {chapter}")
    return record


def load_json(path: Path, parameter: str, rerun: str, first: str) -> Any:
    """A results file's JSON; a missing, unreadable or malformed one is an error naming it, with
    `first` (how to make it) or `rerun` (how to make it anew)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{parameter}: {path} does not exist; {first}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{parameter}: {path} is not a valid results file ({err}); it is damaged or "
                         f"truncated: {rerun}") from None
    except OSError as err:
        raise ValueError(f"{parameter}: cannot read {path} ({err.strerror or err})") from None


def load_record(path: str | Path, name: str, parameter: str, rerun: str) -> dict:
    """Another results file of a build at `path`, checked against the format of `<name>.json`
    (`bench`, `chapter_lanes`, `04_decode_timing`) as `load_results` checks a chapter's."""
    path = resolve_path(Path(path))
    record = load_json(path, parameter, rerun, rerun)
    schema.check(record, name, path, parameter, rerun)
    return record


def check_fields(results_dir: str | Path, read_by: str, *computations) -> None:
    """Run a summary page's computations once, in its first cell. A results file written by
    another version of kvutils, or edited by hand, lacks fields the page reads: that is named
    here, with the folder and what to do, rather than as a bare KeyError in a later cell."""
    for compute in computations:
        try:
            compute()
        except (KeyError, TypeError, IndexError, AttributeError, StopIteration) as err:
            raise ValueError(f"results_dir: the results in {results_dir} lack what {read_by} reads "
                             f"({type(err).__name__}: {err}); they were written by another version of "
                             "kvutils or edited: rerun the chapters (make book)") from None
