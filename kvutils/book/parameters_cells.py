"""The notebooks' `parameters` cells and the parameter table of CONTRIBUTING.md (the README links to it),
written from the one
declaration of each notebook's parameters (kvutils.studies.parameters).

    python -m kvutils.book.parameters_cells           # list what differs from the declarations (exit 1 if
any)
    python -m kvutils.book.parameters_cells --write   # rewrite those cells and the parameter table

tests/test_parameters.py fails while a cell or the table differs.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvutils.core.catalog import NOTEBOOKS, PAGES
from kvutils.core.declared import ReadmeRow
from kvutils.core.paths import repo_root
from kvutils.studies.parameters import DECLARED

START = ("<!-- parameters:start: written from kvutils/studies/parameters.py by python -m "
         "kvutils.book.parameters_cells --write -->")
END = "<!-- parameters:end -->"
HEADER = ("| notebook | name | meaning | default (full profile) | allowed |\n"
          "|---|---|---|---|---|")

# --------------------------------------------------------------------------- the notebooks' cells


def notebook_path(notebook: str, root: Path | None = None) -> Path:
    return (root or repo_root()) / "notebooks" / f"{notebook}.ipynb"


def parameters_cell(nb: dict) -> dict:
    """The cell tagged `parameters` (papermill injects its values after it)."""
    return next(c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", []))


def stale_cells(root: Path | None = None) -> list[str]:
    """The notebooks whose parameters cell is not their declaration's `cell_source()`."""
    return [notebook for notebook, declared in DECLARED.items()
            if "".join(parameters_cell(_read(notebook_path(notebook, root)))["source"])
            != declared.cell_source()]


def unreadable_lines(source: str) -> list[str]:
    """The lines of a parameters cell that papermill cannot read: it takes `name = value  # comment`
    and skips, with a warning only, a line holding a second "=" (so `-p name ...` would not find it)."""
    return [line for line in source.splitlines() if line.strip() and not line.startswith("#") and line.count(
        "=") != 1]


def write_cells(root: Path | None = None) -> list[str]:
    """Rewrite each stale parameters cell (and nothing else of its notebook); return their notebooks.
    A declaration whose cell papermill could not read is refused, naming its lines."""
    for notebook, declared in DECLARED.items():
        if bad := unreadable_lines(declared.cell_source()):
            raise ValueError(f"{notebook}: papermill cannot read these parameter lines (one '=' each): {bad}")
    stale = stale_cells(root)
    for notebook in stale:
        path = notebook_path(notebook, root)
        nb = _read(path)
        parameters_cell(nb)["source"] = DECLARED[notebook].cell_source().splitlines(keepends=True)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return stale


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- the parameter table

# the reference the README links to: the table stands there between its markers
TABLE_FILE = "CONTRIBUTING.md"


def _label(notebook: str) -> str:
    """'1 `01_cache_exactness`' for a chapter, '06 `06_conclusions`' or 'A `appendix_a_...`' for a page."""
    number = next(n for n, name in {**NOTEBOOKS, **PAGES}.items() if name == notebook)
    return f"{number.lstrip('0') if notebook in NOTEBOOKS.values() else number} `{notebook}`"


def readme_table() -> str:
    """One row per parameter (or group of parameters) and the notebooks that declare it alike;
    the rows that every chapter shares (`all`) first, then the others in the book's order."""
    notebooks_of: dict[ReadmeRow, list[str]] = {}
    for notebook, declared in DECLARED.items():
        for row in declared.readme_rows():
            notebooks_of.setdefault(row, []).append(notebook)
    chapters = list(NOTEBOOKS.values())
    # stable: else the book's order
    ordered = sorted(notebooks_of.items(), key=lambda item: item[1] != chapters)
    lines = [f"| {'all' if notebooks == chapters else ', '.join(map(_label, notebooks))} | {row.names} | "
             f"{row.meaning} | {row.default} | {row.allowed} |" for row, notebooks in ordered]
    return "\n".join([HEADER, *lines])


def with_table(readme: str) -> str:
    """The text of TABLE_FILE with the generated table between its two markers."""
    if readme.count(START) != 1 or readme.count(END) != 1 or readme.index(START) > readme.index(END):
        raise ValueError(
            f"{TABLE_FILE}: the parameter table must stand between one {START!r} and one {END!r}")
    before, rest = readme.split(START)
    _, after = rest.split(END)
    return f"{before}{START}\n{readme_table()}\n{END}{after}"


def write_readme(root: Path | None = None) -> bool:
    """Rewrite the parameter table if it differs; True if it did."""
    path = (root or repo_root()) / TABLE_FILE
    text = path.read_text(encoding="utf-8")
    if with_table(text) == text:
        return False
    path.write_text(with_table(text), encoding="utf-8")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvutils.book.parameters_cells",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true",
                        help="rewrite the stale cells and the parameter table")
    args = parser.parse_args(argv)
    if args.write:
        written = write_cells() + ([TABLE_FILE] if write_readme() else [])
        print("rewrote " + ", ".join(written) if written else "every cell and the parameter table match the "
                                                              "declarations")
        return 0
    readme = (repo_root() / TABLE_FILE).read_text(encoding="utf-8")
    stale = stale_cells() + ([TABLE_FILE] if with_table(readme) != readme else [])
    print(f"differ from kvutils/studies/parameters/: {', '.join(stale)}; rewrite them with --write" if stale
          else "every cell and the parameter table match the declarations")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
