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

from kvutils.studies.parameters.chapter1 import RECOMPUTE_MODES, Chapter1Parameters
from kvutils.studies.parameters.chapter2 import Chapter2Parameters
from kvutils.studies.parameters.chapter3 import Chapter3Parameters
from kvutils.studies.parameters.chapter4 import DEFAULT_OPS, FRONTIER_OPS, Chapter4Parameters
from kvutils.studies.parameters.chapter5 import Chapter5Parameters
from kvutils.studies.parameters.pages import (
    AppendixAParameters,
    AppendixBParameters,
    ConclusionsParameters,
    PageParameters,
)

__all__ = ["DECLARED", "DEFAULT_OPS", "FRONTIER_OPS", "RECOMPUTE_MODES", "AppendixAParameters",
           "AppendixBParameters", "Chapter1Parameters", "Chapter2Parameters", "Chapter3Parameters",
           "Chapter4Parameters", "Chapter5Parameters", "ConclusionsParameters", "PageParameters"]

DECLARED = {c.NOTEBOOK: c for c in (Chapter1Parameters, Chapter2Parameters, Chapter3Parameters,
                                    Chapter4Parameters, Chapter5Parameters, ConclusionsParameters,
                                    AppendixAParameters, AppendixBParameters)}
