"""The published study's figures (data/article_figures.json): the reference column of every chapter."""
from __future__ import annotations

import json
from functools import lru_cache

from kvutils.core.paths import REPO_ROOT

ARTICLE_FIGURES = REPO_ROOT / "data" / "article_figures.json"


@lru_cache(maxsize=1)
def article() -> dict:
    """The article's reference figures, read once."""
    return json.loads(ARTICLE_FIGURES.read_text())
