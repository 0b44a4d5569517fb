"""The book builds (-W: a warning fails) from the quick profile's executed chapters, with the glued
numbers, the figures and the side-by-side tables on every chapter page, and no widget manager or
other script fetched from a CDN for the explorer."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvutils.paths import REPO_ROOT


@pytest.fixture(scope="module")
def built(quick_chapters, tmp_path_factory):
    root, executed = quick_chapters
    site = tmp_path_factory.mktemp("book")
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(REPO_ROOT / name, site / name)
    shutil.copytree(REPO_ROOT / "book", site / "book", ignore=shutil.ignore_patterns("chapters"))
    (site / "book" / "chapters").mkdir()
    for notebook in executed.values():
        shutil.copy(notebook, site / "book" / "chapters")
    jb = [str(Path(sys.executable).parent / "jupyter-book"), "build", "-W", "--keep-going", str(site)]
    build = subprocess.run(jb, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    return root, site / "_build" / "html"


def _page(html: Path, name: str) -> str:
    return (html / "book" / "chapters" / f"{name}.html").read_text()


def _text(page: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))


def test_chapter1_page(built):
    root, html = built
    page = _page(html, "01_cache_exactness")
    n = json.loads((root / "results" / "01_cache_exactness.json").read_text())["parameters"]["n_prompts"]
    assert f"{n}/{n} identical sequences on tiny-llama" in page
    assert "Side by side with the article" in page and "article (Pythia)" in page
    assert page.count('<img alt="../../_images/') >= 1


def test_chapter2_page(built):
    _, html = built
    text = _text(_page(html, "02_bert_contrast"))
    assert "tiny-llama: largest cosine distance 0, largest relative key difference 0, states bit-identical for 16 of 16 words" in text
    assert "tiny-bert: 0 at the embeddings" in text
    assert "0.529898 (BERT-base, layer 12)" in text  # the article's column
    assert _page(html, "02_bert_contrast").count('<img alt="../../_images/') == 1


def test_chapter3_page(built):
    _, html = built
    page = _page(html, "03_sense_probes")
    text = _text(page)
    assert "tiny-llama: 50% at all 3 depths" in text and "tiny-gemma3: 50% at all 7 depths" in text
    assert "90.625 [5, 6, 12]" in text  # the article's column
    assert page.count('<img alt="../../_images/') == 3  # probe chart, attention split, explorer view
    assert "widget-view" not in page and "html-manager" not in page and "require.min.js" not in page


def test_chapter4_page(built):
    _, html = built
    page = _page(html, "04_cache_approximations")
    text = _text(page)
    assert "tiny-llama: " in text and " ms with and " in text and "without the cache at 128 tokens" in text
    assert "68.625 / 8.578" in text  # the article's DeepSeek-V3 row, recomputed by the formula
    assert "0.064307 · 86.3 · 17.8661" in text  # the article's bf16 row beside ours
    assert page.count('<img alt="../../_images/') == 4


def test_chapter5_page(built):
    _, html = built
    page = _page(html, "05_qwen3_switch")
    text = _text(page)
    assert "tiny-qwen3: largest |logit difference| of the tail patch 0 (k = 1)" in text
    assert "0.0423106 / 91.11" in text
    assert page.count('<img alt="../../_images/') == 4


def test_every_page_is_in_the_navigation(built):
    _, html = built
    intro = (html / "book" / "intro.html").read_text()
    for name in ("01_cache_exactness", "02_bert_contrast", "03_sense_probes", "04_cache_approximations",
                 "05_qwen3_switch"):
        assert f"chapters/{name}.html" in intro
