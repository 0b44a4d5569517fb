"""Chapter 4's parameters (notebooks/04_cache_approximations.ipynb): what each approximation of the
cache costs in fidelity, bytes and time, on the bytes-vs-fidelity frontier and in long-range retrieval."""
from __future__ import annotations

from dataclasses import dataclass

from kvutils.core.declared import Declared, param
from kvutils.studies.parameters.shared import CAUSAL, CORPUS, CORPUS_DOC, chapter_results_dir, torch_device
from kvutils.studies.parameters.values import (
    at_least,
    depths,
    integers,
    model_list,
    model_subset,
    tokens,
    true_or_false,
)

DEFAULT_OPS = "default"  # the article's twelve rows and this book's additions (cache.ARTICLE_OPS + EXTRA_OPS)
FRONTIER_OPS = ("cast, KIVI-4/2, window 128, fp8 QuantizedCache, 6 presses at compression 0.25/0.5; h2o "
                "at 0.5, tova at 0.25 and 0.5 and a 4-sink window at each press level, with the fixed budget "
                "that equals a press's mean held entries over the decode: 576 = 512 + 128/2 at 0.5")


@dataclass(frozen=True)
class Chapter4Parameters(Declared):
    NOTEBOOK = "04_cache_approximations"
    EXAMPLE = "-p table2_models gemma3-270m,smollm2-135m"

    models: str = param("gemma3-270m,smollm2-135m", "causal models for decode timing and bytes per token",
                        meaning="models for decode timing and bytes per token", allowed=CAUSAL,
                        check=model_list)
    table2_models: str = param("smollm2-135m",
                               "models scored on every cache operation (a subset of models; each adds "
                               "minutes)", meaning="models scored on every cache operation",
                               allowed="a subset of `models` (each adds minutes)", check=model_list)
    ops: str = param(DEFAULT_OPS,
                     "\"default\" (the article's rows + ours) or cache-operation specs separated by \";\"",
                     meaning="cache operations", note="the article's 12 + ours",
                     allowed='specs separated by `;`, e.g. `"quantize_kivi:bits=4; window:size=128,sinks=4"`')
    corpus: str = param("pydoc", CORPUS_DOC, meaning="documents", allowed=CORPUS)
    n_docs: int = param(16, "documents scored per operation (the article used 16)",
                        meaning="documents per operation",
                        allowed="≥ 1, each at least `prefill + decode + 1` tokens", check=at_least(1))
    skip_short: bool = param(True,
                             "leave out documents shorter than prefill + decode + 1 tokens (they are "
                             "listed); False: stop with an error naming them",
                             meaning="leave out documents shorter than `prefill + decode + 1` tokens (listed "
                                     "on the page)",
                             allowed="`True`; `False` stops with an error naming them", check=true_or_false)
    prefill: int = param(256, "tokens cached before teacher-forced decoding (article: 256)",
                         meaning="cached tokens, then teacher-forced tokens", allowed="≥ 1", check=tokens())
    decode: int = param(256, "teacher-forced tokens scored after the prefill (article: 256)", row="prefill",
                        check=tokens())
    chunk_decode: int = param(64,
                              "teacher-forced tokens for the chunk rows: 128 context + 128 chunk + 64 (the "
                              "article's)",
                              meaning="teacher-forced tokens of the chunk rows (128 + 128 + this)",
                              allowed="≥ 1", check=tokens())
    contexts: str | int = param("128,2000",
                                "context lengths at which one decode step is timed (article: 128 and 2,000)",
                                meaning="context lengths of the decode-step timing",
                                allowed="integers separated by commas", check=integers)
    timing_repeats: int = param(5,
                                "repeats per timing at least (up to 3 times more while the spread exceeds 10 "
                                "% of the median); the median is reported",
                                meaning="repeats per timing, at least (median reported)", allowed="≥ 1",
                                check=at_least(1))
    frontier_models: str = param("gemma3-270m,smollm2-135m",
                                 "models on the bytes-vs-fidelity frontier (a subset of models)",
                                 meaning="models on the bytes-vs-fidelity frontier",
                                 allowed='a subset of `models`; `""` for none', check=model_subset)
    frontier_ops: str = param(DEFAULT_OPS,
                              '"default" (the deployed methods: presses at compression 0.25/0.5; h2o, '
                              'tova and a 4-sink window at matched budgets) or specs separated by ";"',
                              meaning="methods on the frontier", note=FRONTIER_OPS,
                              allowed="specs separated by `;` (no chunk operations)")
    frontier_docs: int = param(16,
                               "documents scored on the frontier (16, as Table 2: enough for an interval "
                               "wholly below the line): the first with frontier_prefill + frontier_decode + "
                               "1 tokens (shorter ones are skipped)",
                               meaning="documents scored on the frontier (the first of `corpus` with "
                                       "`frontier_prefill` + `frontier_decode` + 1 tokens; shorter ones are "
                                       "skipped)", allowed="≥ 1 (pydoc has 22 long enough at the defaults)",
                               check=at_least(1))
    frontier_prefill: int = param(1024,
                                  "frontier tokens cached before decoding (long enough that SnapKV's "
                                  "64-token window is a small share)",
                                  meaning="frontier tokens cached before decoding",
                                  note="SnapKV's 64-token window is 6 % of it; Table 2 keeps the article's "
                                       "256", allowed="≥ 1, and more than each press's window",
                                  check=tokens())
    frontier_decode: int = param(64,
                                 "frontier tokens teacher-forced and scored after the prefill (decode-time "
                                 "policies step through each; each operation's time grows with them: 64 fit "
                                 "make book's budget)",
                                 meaning="frontier tokens teacher-forced and scored after the prefill",
                                 allowed="≥ 1", check=tokens())
    retrieval_models: str = param("gemma3-270m,smollm2-135m",
                                  'models on the long-range retrieval test (a subset of models; "" for none; '
                                  "at 1,024 and 2,048 tokens, 18 + 12 prompts each, 19 to 28 minutes of one "
                                  "core each)", meaning="models on the long-range retrieval test",
                                  allowed='a subset of `models`; `""` for none', check=model_subset)
    retrieval_corpus: str = param("pydoc",
                                  "real-text haystack for RULER's magic-number needles: " + CORPUS_DOC,
                                  meaning="real-text haystack (RULER's magic-number needles)", allowed=CORPUS)
    retrieval_contexts: str | int = param("1024,2048",
                                          "prompt lengths in tokens, each a separate test (2048 costs 1.5 to "
                                          "1.9 times 1024 per question)",
                                          meaning="retrieval prompt lengths (tokens)",
                                          allowed="integers ≥ 128 separated by commas, within the model's "
                                                  "context", check=integers)
    retrieval_prompts: int = param(18, "real-text haystacks per context (depths taken in turn: 6 per depth; "
                                   "a multiple of 9 asks every depth first with every shape)",
                                   meaning="real-text haystacks per context", allowed="≥ 1",
                                   check=at_least(1))
    filler_prompts: int = param(6,
                                "pass-key questions per context in the repeated filler (the easy control; 0: "
                                "none)", meaning="pass-key questions per context in the filler (0: none)",
                                allowed="≥ 0", check=at_least(0))
    retrieval_depths: str | float = param("0.1,0.5,0.9", "where the needle sits, as shares of the haystack",
                                          meaning="needle depths (shares of the haystack)",
                                          allowed="numbers strictly between 0 and 1, separated by commas",
                                          check=depths)
    results_dir: str = chapter_results_dir()
    device: str = torch_device()
