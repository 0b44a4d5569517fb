"""Chapter 4's page: every text its prose glues in, from one call (`glue_page`)."""
from __future__ import annotations

from kvutils.core import compare
from kvutils.report import frontier, retrieval, retrieval_seeds, retrieval_ties
from kvutils.report.cache_approximations import chapter4_findings, chapter4_glue
from kvutils.report.text import Finding, Markdown


def glue_page(numbers: dict) -> dict:
    """{key: text} for the notebook to glue under "ch4_" (`kvutils.report.text.glue_page`): the
    run's settings and costs (plain), the frontier's verdicts (Markdown: method names in bold), the
    findings (numbers in bold) and the retrieval section's sentences."""
    return {**chapter4_glue(numbers),
            "frontier": Markdown(frontier.frontier_glue(numbers["frontier"])),
            "frontier_setup": frontier.frontier_setup(numbers["frontier"]),
            "frontier_kvpress": frontier.kvpress_glue(numbers["frontier"]),
            "compare_method": compare.METHOD,
            **{key: Finding(text) for key, text in chapter4_findings(numbers).items()},
            **retrieval.retrieval_glue(numbers),
            "retrieval_setup": retrieval.retrieval_setup(numbers)
            + retrieval_ties.head_ties(numbers.get("retrieval") or {}, numbers.get("frontier") or {}),
            "retrieval_seeds": retrieval_seeds.seeds_findings(numbers.get("retrieval") or {})}
