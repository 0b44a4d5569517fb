"""The summary pages' parameters (conclusions and appendices): each reads the chapters' results and
loads no model."""
from __future__ import annotations

from dataclasses import dataclass

from kvutils.core.declared import Declared, param
from kvutils.studies.parameters.values import percentage


@dataclass(frozen=True)
class PageParameters(Declared):
    """A summary page reads the chapters' results; it loads no model."""

    results_dir: str = param("results", "the folder holding every chapter's results file (and bench.json)",
                             meaning="the folder whose results files (and `bench.json`) the page reads",
                             allowed="a folder holding every chapter's results")


@dataclass(frozen=True)
class ConclusionsParameters(PageParameters):
    NOTEBOOK = "06_conclusions"

    near_exact_pct: float = param(99.0,
                                  "top-1 agreement (%) the guide tests each approximation against, per "
                                  "document: near-exact when the test puts it above, costly when below",
                                  meaning="top-1 agreement (%) the decision guide tests each approximation "
                                          "against (near-exact above it, costly below, no colour where the "
                                          "test does not separate)", allowed="0 < value ≤ 100",
                                  check=percentage)


@dataclass(frozen=True)
class AppendixAParameters(PageParameters):
    NOTEBOOK = "appendix_a_reproducibility"


@dataclass(frozen=True)
class AppendixBParameters(PageParameters):
    NOTEBOOK = "appendix_b_performance"
