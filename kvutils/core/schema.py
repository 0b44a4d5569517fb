"""The results files' format: one JSON Schema per file, and the check every reader goes through.

Each file a build writes under `results/` has a schema beside this module, in `schemas/`:
`<name>.schema.json` for `<name>.json` (the five chapters, `04_decode_timing`, `chapter_lanes` and
`bench`). They are readers' documentation as much as checks: a tool of your own can validate a
results file against them with any JSON Schema library (draft 2020-12), as this module does.

What the schemas hold, and what they leave open:
- every object whose keys are fixed lists them all, each required where every run writes it, and
  allows no other (`additionalProperties: false`): a renamed or misspelt key fails here, naming
  the file and where, not later as a bare KeyError on a page;
- an object keyed by data (models, cache operations, k, adapters, dtypes, pairs of methods) gives
  the schema of its entries (`additionalProperties`), not the keys, which depend on the run's
  parameters;
- numbers may be null: a NaN or infinity is written as null (`kvutils.core.results.jsonable`).

A change to what a study writes changes its schema in the same commit: a new number is one entry
under its object's "properties" (e.g. `"p": {"type": ["number", "null"]}`) and, where every run
writes it, its name in that object's "required". tests/unit/test_schemas.py validates the quick
book's results and a full build's (tests/data/full_build/) against them, so a key written but not in
the schema, or in the schema but no longer written, fails there.
"""
from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMAS = Path(__file__).with_name("schemas")
SHOWN = 240  # characters of a failing value shown in an error (a results object can be large)


def schema_path(name: str) -> Path:
    """The schema of results file `<name>.json`."""
    return SCHEMAS / f"{name}.schema.json"


def has_schema(name: str) -> bool:
    return schema_path(name).is_file()


@cache
def _validator(name: str):
    from jsonschema import Draft202012Validator

    schema = json.loads(schema_path(name).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def problems(record: Any, name: str) -> list[str]:
    """Where `record` departs from the schema of `<name>.json`, one line each ("at numbers/…: …"),
    the most relevant first; empty when it follows it."""
    from jsonschema.exceptions import relevance

    errors = sorted(_validator(name).iter_errors(record), key=relevance, reverse=True)  # best_match first
    return [f"at {'/'.join(map(str, e.absolute_path)) or 'the top'}: {_short(e.message)}" for e in errors]


def check(record: Any, name: str, path: Path | str, parameter: str, rerun: str) -> None:
    """Raise a ValueError naming `parameter`, the file, the first place it departs from its schema
    (and how many others there are) and `rerun` (what writes it anew)."""
    found = problems(record, name)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise ValueError(f"{parameter}: {path} does not follow its format, "
                         f"kvutils/core/schemas/{name}.schema.json, {found[0]}{more}; it was written by "
                         f"another version of kvutils or edited: {rerun}")


def _short(message: str) -> str:
    return message if len(message) <= SHOWN else message[:SHOWN] + " …"
