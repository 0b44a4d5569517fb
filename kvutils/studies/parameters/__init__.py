"""Every parameter of the book, declared once: one declaration per notebook (kvutils.core.declared).

Each notebook's `parameters` cell, the parameter table (CONTRIBUTING.md), the check of each single value
and the `parameters` its results file records come from here; a study's `plan(p)` takes the
declaration, and checks what needs a model or a file. The studies import this package, not the
other way round (it takes constants from light modules of theirs), so a notebook's first cell
checks its parameters before the studies load.

| module | declares |
|---|---|
| `values` | the checks of one value the declarations share (counts, tokens, layers, choices, devices) |
| `shared` | the fields several notebooks declare alike (results folder, device, sense models, corpus) |
| `chapter1` … `chapter5` | one chapter's declaration each |
| `pages` | the summary pages' (conclusions and appendices) |

`python -m kvutils.book.parameters_cells --write` rewrites the cells and the table after an edit.
"""
from __future__ import annotations

import importlib

# where each name lives; imported when first asked for (PEP 562), so that a study importing its own
# chapter's module (`kvutils.studies.parameters.chapter1`) does not import every chapter's: a study's
# import closure, which decides when its results are reused (kvutils.studies.units), holds its own
# declaration only
_WHERE = {"RECOMPUTE_MODES": "chapter1", "Chapter1Parameters": "chapter1", "Chapter2Parameters": "chapter2",
          "Chapter3Parameters": "chapter3", "DEFAULT_OPS": "chapter4", "FRONTIER_OPS": "chapter4",
          "Chapter4Parameters": "chapter4", "Chapter5Parameters": "chapter5", "AppendixAParameters": "pages",
          "AppendixBParameters": "pages", "ConclusionsParameters": "pages", "PageParameters": "pages"}
_DECLARATIONS = ("Chapter1Parameters", "Chapter2Parameters", "Chapter3Parameters", "Chapter4Parameters",
                 "Chapter5Parameters", "ConclusionsParameters", "AppendixAParameters", "AppendixBParameters")

__all__ = ["DECLARED", *_WHERE]


def __getattr__(name: str):
    if name == "DECLARED":  # {notebook: its declaration}, every notebook's
        return {c.NOTEBOOK: c for c in map(__getattr__, _DECLARATIONS)}
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
