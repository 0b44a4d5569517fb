"""The published study's figures (data/article_figures.json): the reference column of every chapter."""
from __future__ import annotations

import json
from functools import lru_cache

from kvutils.core.paths import repo_file

ARTICLE_FIGURES = "data/article_figures.json"  # in the repository


@lru_cache(maxsize=1)
def article() -> dict:
    """The article's reference figures, read once."""
    return json.loads(repo_file(ARTICLE_FIGURES).read_text())
