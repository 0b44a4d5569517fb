"""Chapter 1's parameters (notebooks/01_cache_exactness.ipynb): is the cache exact?"""
from __future__ import annotations

from dataclasses import dataclass

from kvutils.core.declared import Declared, param
from kvutils.models.checks import DTYPES
from kvutils.studies.parameters.shared import CAUSAL, CORPUS, CORPUS_DOC, chapter_results_dir, torch_device
from kvutils.studies.parameters.values import at_least, model_list, one_of, some_of, tokens

RECOMPUTE_MODES = ("one_pass", "per_step")  # chapter 1's no-cache side


@dataclass(frozen=True)
class Chapter1Parameters(Declared):
    NOTEBOOK = "01_cache_exactness"
    EXAMPLE = "-p models smollm2-135m -p n_prompts 8"

    models: str = param("gemma3-270m,smollm2-135m",
                        "comma-separated registry keys, Hugging Face ids or local paths",
                        meaning="models to test", allowed=CAUSAL, check=model_list)
    dtypes: str = param("float32,float64",
                        "precisions to run; float64 separates rounding from real differences",
                        meaning="precisions", allowed="`float32`, `float64`", check=some_of(DTYPES))
    n_prompts: int = param(24, "prompts, one per corpus document (the article used 24)",
                           meaning="prompts, one per document", allowed="1 … documents in the corpus",
                           check=at_least(1))
    prompt_tokens: int = param(32, "tokens per prompt (article: 32)", meaning="tokens per prompt",
                               allowed="≥ 1, every document at least this long", check=tokens())
    new_tokens: int = param(64, "greedy tokens generated after each prompt (article: 64)",
                            meaning="greedy tokens per prompt",
                            allowed="≥ 1, `prompt_tokens + new_tokens` ≤ model context", check=tokens())
    recompute: str = param("one_pass",
                           'no-cache side: "one_pass" (one full forward over the final text) or "per_step" '
                           "(regenerate from scratch each step, the article's procedure)",
                           meaning="how the no-cache side is computed",
                           allowed="`one_pass`, `per_step` (the article's procedure; cost grows with the "
                                   "square of the length)", check=one_of(RECOMPUTE_MODES))
    per_step_prompts: int = param(1,
                                  "with one_pass: the first prompts also decoded per step, reported beside "
                                  "one pass (0: none)",
                                  meaning='with `recompute="one_pass"`: the first prompts also decoded by '
                                          "the article's per-step procedure, reported beside one pass",
                                  allowed="≥ 0 (0: none; capped at `n_prompts`)", check=at_least(0))
    batch_size: int = param(8, "prompts decoded together (no padding: all prompts have prompt_tokens tokens)",
                            meaning="prompts decoded together", allowed="≥ 1", check=at_least(1))
    corpus: str = param("pydoc", CORPUS_DOC, meaning="prompt documents", allowed=CORPUS)
    senses_file: str = param("data/senses.json", "the ambiguous words and their two continuations",
                             meaning="ambiguous words", allowed="a file in that format")
    garden_paths_file: str = param("data/garden_paths.json",
                                   "the garden-path prefixes and their two continuations",
                                   meaning="garden-path prefixes", allowed="a file in that format")
    results_dir: str = chapter_results_dir()
    device: str = torch_device()
