import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import kvutils  # noqa: E402

CAUSAL_TINY = ["tiny-neox", "tiny-llama", "tiny-qwen3", "tiny-gemma3"]

_loaded = {}


def load_cached(name: str, dtype: str):
    """One instance per (model, dtype) for the whole session; tests must not modify it."""
    key = (name, dtype)
    if key not in _loaded:
        _loaded[key] = kvutils.load(name, dtype)
    return _loaded[key]


@pytest.fixture
def text_prompts():
    """Real English prompts: the start of CPython's language reference sections."""
    from kvutils import data

    docs = data.load_corpus()

    def make(tokenizer, n: int, length: int) -> torch.Tensor:
        return data.prompts_from_corpus(tokenizer, docs, n, length)

    return make


@pytest.fixture(scope="session")
def quick_chapters(tmp_path_factory):
    """Every chapter executed once on the quick profile: (root, {chapter: executed notebook}), with
    results in root/results and the executed copies in root/book/chapters."""
    from kvutils import chapters

    root = tmp_path_factory.mktemp("quick")
    executed = {ch: chapters.run_chapter(ch, "quick", root / "results", root / "book" / "chapters")
                for ch in chapters.NOTEBOOKS}
    return root, executed
