"""A notebook's first cell: its parameters as papermill set them, checked before any model loads.

What a notebook's parameters are (names, defaults) is declared once, in a `kvutils.core.declared`
declaration; these functions take the declared names or defaults. The checks of single values
are in kvutils.core.checks.
"""
from __future__ import annotations

import ast
import difflib
import time
from collections.abc import Iterable
from pathlib import Path

from kvutils.core import results
from kvutils.core.catalog import NOTEBOOKS

PAPERMILL_CELL = "# Parameters\n"  # how papermill's injected cell (-p, -y, -f) begins
RUNS_DIR = "runs"  # where a run with other parameters goes when results_dir is left at its default


def assigned_names(source: str) -> list[str]:
    """The names of the top-level `name = value` assignments of a cell."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    return [node.targets[0].id for node in body
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0],
                                                                                      ast.Name)]


def injected_names(namespace: dict) -> list[str]:
    """The names papermill set in this kernel: it runs them as a cell of their own, after the
    parameters cell, that IPython keeps in its input history (`In`)."""
    history = namespace.get("In") or namespace.get("_ih") or []
    names = []
    for source in history:
        if isinstance(source, str) and source.startswith(PAPERMILL_CELL):
            names += [name for name in assigned_names(source) if name not in names]
    return names


def reject_unknown(namespace: dict, notebook: str, known: Iterable[str]) -> None:
    """A name given with `-p` that the notebook does not declare stops the run, naming it and the
    closest parameter (papermill itself only warns, and the run would go on with the defaults)."""
    check_names(injected_names(namespace), notebook, known)


def check_names(names: Iterable[str], notebook: str, known: Iterable[str]) -> None:
    """Every name is one of `known` (the parameters of `notebook`), or an error names each that is
    not and the closest parameter."""
    known = list(known)
    unknown = [n for n in names if n not in known]
    if not unknown:
        return
    lowered = {k.lower(): k for k in known}
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
        hints.append(f"{name}: not a parameter of {notebook}"
                     + (f" (did you mean {lowered[close[0]]}?)" if close else ""))
    raise ValueError("; ".join(hints) + f". Its parameters: {', '.join(known)}")


def run_folder(namespace: dict, notebook: str, defaults: dict) -> str:
    """results_dir for this run. Left at its default while other parameters are not, a run outside
    `make chapter` would replace the book's results, which the next page build publishes; it goes
    to runs/<notebook>-<time>/ instead. An explicit results_dir (as `make chapter` passes) is kept."""
    given = namespace.get("results_dir", defaults.get("results_dir"))
    if given != defaults.get("results_dir"):
        return given
    changed = (
        [n for n,
         default in defaults.items() if n != "results_dir" and n in namespace and namespace[n] != default])
    if not changed:
        return given
    number = next((n for n, name in NOTEBOOKS.items() if name == notebook), "NN")
    folder = str(Path(RUNS_DIR) / f"{notebook}-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"results_dir: {', '.join(changed)} differ from the book's defaults, so this run writes to "
          f"{folder}/, not to the book's {given}/ (the next page build would publish it). To rerun "
          f"the chapter into the book: make chapter N={number} PARAMS=\"-p name value ...\"; to choose "
          "the folder: -p results_dir <folder>.")
    return folder


def check_notebook(namespace: dict, notebook: str, defaults: dict) -> str:
    """The checks every notebook's first cell makes before any model loads: no unknown parameter
    (`defaults` holds the declared ones), and results_dir usable (written by a chapter, read by a
    summary page). Returns the results_dir to use (see `run_folder`)."""
    reject_unknown(namespace, notebook, defaults)
    results_dir = namespace.get("results_dir")
    if notebook not in NOTEBOOKS.values():  # a summary page reads the chapters' results
        if not isinstance(results_dir, (str, Path)) or not results.expand(results_dir,
                                                                          "results_dir").is_dir():
            raise ValueError(f"results_dir: {results_dir!r} is not a folder; give the folder that holds the "
                             "chapters' results files (make book writes them to results/)")
        results.recover(results.expand(results_dir, "results_dir"))
        return str(results.expand(results_dir, "results_dir"))
    results_dir = run_folder(namespace, notebook, defaults)
    folder = results.check_output(results_dir, notebook)  # "~/runs" as the folder it names
    results.claim(folder, notebook)  # one run of this chapter at a time into this folder
    return str(folder)


def papermill_value(raw: str):
    """A `-p NAME VALUE` value as papermill's command line reads it: "True", "False" and "None" as
    themselves, then an int, then a float, else the text unchanged. So "2,4,8" stays the text
    "2,4,8" (a Python reader would make it the tuple (2, 4, 8)) and "0.001" becomes 0.001; the
    declaration then records each in its one form (kvutils.core.declared.canonical)."""
    named = {"True": True, "False": False, "None": None}
    if raw in named:
        return named[raw]
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw
