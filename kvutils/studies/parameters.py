"""Every parameter of the book, declared once: one declaration per notebook (kvutils.core.declared).

Each notebook's `parameters` cell, the parameter table (CONTRIBUTING.md), the check of each single value
and the `parameters` its results file records come from here; a study's `plan(p)` takes the
declaration, and checks what needs more than one value, a model or a file. The studies import this
module, not the other way round (it takes constants from two light modules of theirs), so a
notebook's first cell checks its parameters before the studies load.
`python -m kvutils.book.parameters_cells --write` rewrites the cells and the table after an edit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvutils.core import checks, near_exact
from kvutils.core.declared import Declared, param
from kvutils.core.haystack import check_depths
from kvutils.lora.schedule import LOSSES, SCHEDULES
from kvutils.models.checks import DTYPES
from kvutils.studies.qwen3_switch.tasks import TASKS
from kvutils.studies.sense_probes.templates import DEFAULT_REPEAT_TEMPLATE, DISTANCES, check_repeat_template

RECOMPUTE_MODES = ("one_pass", "per_step")  # chapter 1's no-cache side
DEFAULT_OPS = "default"  # chapter 4: the article's twelve rows and this book's additions (cache.ARTICLE_OPS + EXTRA_OPS)

# --------------------------------------------------------------------------- checks of one value


# upper bounds, each naming why a larger value cannot be meant (a value past them fails at once, not
# after minutes of model loading with an overflow or an allocation that names no parameter)
MAX_LAYERS = 10_000
LAYERS_WHY = "more layers than any model has: the deepest published have a few hundred"
MAX_RANK = 65_536
RANK_WHY = ("wider than any model's layers: a rank at a layer's width is already a full update (and chapter 5 "
            "also checks that the adapters fit in memory, from each model's config)")


def at_least(low: int, high: int = checks.MAX_ITEMS, why: str = checks.ITEMS_WHY):
    """A count of things computed in turn (documents, prompts, repeats): `low` … a million."""
    return lambda name, value: checks.check_int(name, value, low, high, why)


def tokens(low: int = 1):
    """A number of tokens: `low` … more than any model's context (checks.MAX_TOKENS)."""
    return lambda name, value: checks.check_count(name, value, low)


def layers(name: str, value) -> None:
    checks.check_int(name, value, 1, MAX_LAYERS, LAYERS_WHY)


def lora_rank(name: str, value) -> None:
    checks.check_int(name, value, 1, MAX_RANK, RANK_WHY)


def seed_bits(name: str, value) -> None:
    checks.check_seed(name, value)


def one_of(allowed):
    return lambda name, value: checks.check_choice(name, value, allowed)


def some_of(allowed):
    return lambda name, value: checks.check_list(name, value, allowed)


def integers(name: str, value) -> None:
    checks.check_int_list(name, value, 1, checks.MAX_TOKENS)


def usable_device(name: str, value) -> None:
    checks.check_device(value)


def one_device(name: str, value) -> None:
    checks.check_device(value)
    if value == "auto":  # training and the tail patch move every tensor to one device
        raise ValueError("device: 'auto' (a model spread over several devices) is not supported by chapter 5, "
                         "which trains and patches on one device; use 'cpu', 'cuda' or 'cuda:N'")


def depths(name: str, value) -> None:
    check_depths(value, name)


def true_or_false(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def positive_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


MAX_ALPHA = 1e6
ALPHA_WHY = "the adapter's update is scaled by alpha / rank: a million times it would swamp the weights it adapts"


def lora_alpha(name: str, value) -> None:
    positive_number(name, value)
    if value > MAX_ALPHA:
        raise ValueError(f"{name} must be at most {MAX_ALPHA:,.0f} ({ALPHA_WHY}), got {value:g}")


def percentage(name: str, value) -> None:
    checks.check_number(name, value, 0, 100, low_inclusive=False)


def template_with_word(name: str, value) -> None:
    check_repeat_template(value, name)


def visible_marker(name: str, value) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string ('' = the task's own marker), got {value!r}")
    if value and not value.strip():
        raise ValueError(f"{name}: {value!r} is only white space; give visible text, or '' for the task's own marker")


# --------------------------------------------------------------------------- parameters of several notebooks

CAUSAL = "causal registry keys, hub ids, local dirs"
CORPUS = "`pydoc`, a folder of `.txt`, a `.jsonl` with `text`"
CORPUS_DOC = '"pydoc" (CPython\'s language reference), a folder of .txt files, or a .jsonl with a "text" field'


def chapter_results_dir():
    return param("results", "where results/{notebook}.json and figures/ are written",
                 meaning="where the results file and figures go",
                 note="a papermill run with other parameters: `runs/<notebook>-<time>`",
                 allowed="a writable folder, or one that can be created")


def torch_device(check=usable_device):
    return param("cpu", 'torch device, e.g. "cuda" where one exists', meaning="torch device",
                 allowed="`cpu`, `cuda`, `cuda:N`, `mps`, `xpu` where present, or `auto` (accelerate's "
                         '`device_map="auto"`: every accelerator, then the CPU; not chapter 5, which trains on '
                         "one device)", check=check)


def sense_models():
    return param("gemma3-270m,smollm2-135m", "causal models: comma-separated registry keys, Hugging Face ids or local paths",
                 meaning="causal models", allowed=CAUSAL)


def encoder_field(doc: str):
    return param("minilm-l6", doc, meaning="bidirectional encoder(s) to contrast",
                 allowed="encoder keys, e.g. `bert-base-uncased` where its weights exist")


def sentences_file():
    return param("data/senses.json", "the ambiguous words, their two continuations and reference sentences",
                 meaning="ambiguous words, continuations, references",
                 allowed="a file in that format; every word one token for every model")


def sentence_batch():
    return param(32, "sentences per forward pass (right-padded)", meaning="sentences per forward pass",
                 allowed="≥ 1", check=at_least(1))


# --------------------------------------------------------------------------- the chapters


@dataclass(frozen=True)
class Chapter1Parameters(Declared):
    NOTEBOOK = "01_cache_exactness"
    EXAMPLE = "-p models smollm2-135m -p n_prompts 8"

    models: str = param("gemma3-270m,smollm2-135m", "comma-separated registry keys, Hugging Face ids or local paths",
                        meaning="models to test", allowed=CAUSAL)
    dtypes: str = param("float32,float64", "precisions to run; float64 separates rounding from real differences",
                        meaning="precisions", allowed="`float32`, `float64`", check=some_of(DTYPES))
    n_prompts: int = param(24, "prompts, one per corpus document (the article used 24)",
                           meaning="prompts, one per document", allowed="1 … documents in the corpus", check=at_least(1))
    prompt_tokens: int = param(32, "tokens per prompt (article: 32)", meaning="tokens per prompt",
                               allowed="≥ 1, every document at least this long", check=tokens())
    new_tokens: int = param(64, "greedy tokens generated after each prompt (article: 64)", meaning="greedy tokens per prompt",
                            allowed="≥ 1, `prompt_tokens + new_tokens` ≤ model context", check=tokens())
    recompute: str = param("one_pass", 'no-cache side: "one_pass" (one full forward over the final text) or "per_step" '
                           "(regenerate from scratch each step, the article's procedure)",
                           meaning="how the no-cache side is computed",
                           allowed="`one_pass`, `per_step` (the article's procedure; cost grows with the square of the "
                                   "length)", check=one_of(RECOMPUTE_MODES))
    per_step_prompts: int = param(1, "with one_pass: the first prompts also decoded per step, reported beside one pass "
                                  "(0: none)", meaning='with `recompute="one_pass"`: the first prompts also decoded by '
                                  "the article's per-step procedure, reported beside one pass",
                                  allowed="≥ 0 (0: none; capped at `n_prompts`)", check=at_least(0))
    batch_size: int = param(8, "prompts decoded together (no padding: all prompts have prompt_tokens tokens)",
                            meaning="prompts decoded together", allowed="≥ 1", check=at_least(1))
    corpus: str = param("pydoc", CORPUS_DOC, meaning="prompt documents", allowed=CORPUS)
    senses_file: str = param("data/senses.json", "the ambiguous words and their two continuations",
                             meaning="ambiguous words", allowed="a file in that format")
    garden_paths_file: str = param("data/garden_paths.json", "the garden-path prefixes and their two continuations",
                                   meaning="garden-path prefixes", allowed="a file in that format")
    results_dir: str = chapter_results_dir()
    device: str = torch_device()


@dataclass(frozen=True)
class Chapter2Parameters(Declared):
    NOTEBOOK = "02_bert_contrast"
    EXAMPLE = "-p encoder bert-base-uncased"
    distance = "cosine"  # not parameters here: chapter 2 probes nothing, and repeats each word as chapter 3 does
    repeat_template = DEFAULT_REPEAT_TEMPLATE

    models: str = sense_models()
    encoder: str = encoder_field('bidirectional encoder(s), e.g. "bert-base-uncased" where its weights are in the local HF cache')
    senses_file: str = sentences_file()
    batch_size: int = sentence_batch()
    results_dir: str = chapter_results_dir()
    device: str = torch_device()


@dataclass(frozen=True)
class Chapter3Parameters(Declared):
    NOTEBOOK = "03_sense_probes"
    EXAMPLE = "-p distance euclidean"

    models: str = sense_models()
    encoder: str = encoder_field('bidirectional encoder(s) for place (c), e.g. "bert-base-uncased" where its weights exist')
    senses_file: str = sentences_file()
    distance: str = param("cosine", 'the probe\'s distance to the sense centroids: "cosine" or "euclidean"',
                          meaning="the probe's distance to the sense centroids", allowed="`cosine`, `euclidean`",
                          check=one_of(DISTANCES))
    repeat_template: str = param(DEFAULT_REPEAT_TEMPLATE, "how the word is repeated at a new position; must contain {word}",
                                 meaning="how the word is repeated at a new position",
                                 allowed="a format string with `{prefix}` and `{word}` once each (plain fields); may add "
                                         "`{continuation}`", check=template_with_word)
    explorer_word: str = param("bank", "the sentence pair the explorer shows first (a word of senses_file)",
                               meaning="the pair the attention explorer shows first", allowed="a word of `senses_file`")
    explorer_layer: int = param(2, "the layer (1-based) the explorer shows first", meaning="the layer (1-based) it shows first",
                                allowed="≥ 1 (capped at the model's depth)", check=layers)
    batch_size: int = sentence_batch()
    results_dir: str = chapter_results_dir()
    device: str = torch_device()


FRONTIER_OPS = ("cast, KIVI-4/2, window 128, fp8 QuantizedCache, 6 presses at compression 0.25/0.5/0.75; h2o at 0.5, "
                "tova at 0.25 and 0.5 and a 4-sink window at each press level, with the fixed budget that equals a "
                "press's mean held entries over the decode: 576 = 512 + 128/2 at 0.5")


@dataclass(frozen=True)
class Chapter4Parameters(Declared):
    NOTEBOOK = "04_cache_approximations"
    EXAMPLE = "-p table2_models gemma3-270m,smollm2-135m"

    models: str = param("gemma3-270m,smollm2-135m", "causal models for decode timing and bytes per token",
                        meaning="models for decode timing and bytes per token", allowed=CAUSAL)
    table2_models: str = param("smollm2-135m", "models scored on every cache operation (a subset of models; each adds "
                               "minutes)", meaning="models scored on every cache operation",
                               allowed="a subset of `models` (each adds minutes)")
    ops: str = param(DEFAULT_OPS, '"default" (the article\'s rows + ours) or cache-operation specs separated by ";"',
                     meaning="cache operations", note="the article's 12 + ours",
                     allowed='specs separated by `;`, e.g. `"quantize_kivi:bits=4; window:size=128,sinks=4"`')
    corpus: str = param("pydoc", CORPUS_DOC, meaning="documents", allowed=CORPUS)
    n_docs: int = param(16, "documents scored per operation (the article used 16)", meaning="documents per operation",
                        allowed="≥ 1, each at least `prefill + decode + 1` tokens", check=at_least(1))
    skip_short: bool = param(True, "leave out documents shorter than prefill + decode + 1 tokens (they are listed); "
                             "False: stop with an error naming them",
                             meaning="leave out documents shorter than `prefill + decode + 1` tokens (listed on the page)",
                             allowed="`True`; `False` stops with an error naming them", check=true_or_false)
    prefill: int = param(256, "tokens cached before teacher-forced decoding (article: 256)",
                         meaning="cached tokens, then teacher-forced tokens", allowed="≥ 1", check=tokens())
    decode: int = param(256, "teacher-forced tokens scored after the prefill (article: 256)", row="prefill",
                        check=tokens())
    chunk_decode: int = param(64, "teacher-forced tokens for the chunk rows: 128 context + 128 chunk + 64 (the article's)",
                              meaning="teacher-forced tokens of the chunk rows (128 + 128 + this)", allowed="≥ 1",
                              check=tokens())
    contexts: str | int = param("128,2000", "context lengths at which one decode step is timed (article: 128 and 2,000)",
                                meaning="context lengths of the decode-step timing", allowed="integers separated by commas",
                                check=integers)
    timing_repeats: int = param(5, "repeats per timing at least (up to 3 times more while the spread exceeds 10 % of the "
                                "median); the median is reported", meaning="repeats per timing, at least (median reported)",
                                allowed="≥ 1", check=at_least(1))
    frontier_models: str = param("gemma3-270m,smollm2-135m", "models on the bytes-vs-fidelity frontier (a subset of models)",
                                 meaning="models on the bytes-vs-fidelity frontier",
                                 allowed='a subset of `models`; `""` for none')
    frontier_ops: str = param(DEFAULT_OPS, '"default" (the deployed methods: presses at compression 0.25/0.5/0.75; h2o, '
                              'tova and a 4-sink window at matched budgets) or specs separated by ";"',
                              meaning="methods on the frontier", note=FRONTIER_OPS,
                              allowed="specs separated by `;` (no chunk operations)")
    frontier_docs: int = param(8, "documents scored on the frontier: the first with frontier_prefill + frontier_decode + 1 "
                               "tokens (shorter ones are skipped)",
                               meaning="documents scored on the frontier (the first of `corpus` with `frontier_prefill` + "
                                       "`frontier_decode` + 1 tokens; shorter ones are skipped)",
                               allowed="≥ 1 (pydoc has 22 long enough at the defaults)", check=at_least(1))
    frontier_prefill: int = param(1024, "frontier tokens cached before decoding (long enough that SnapKV's 64-token window "
                                  "is a small share)", meaning="frontier tokens cached before decoding",
                                  note="SnapKV's 64-token window is 6 % of it; Table 2 keeps the article's 256",
                                  allowed="≥ 1, and more than each press's window", check=tokens())
    frontier_decode: int = param(64, "frontier tokens teacher-forced and scored after the prefill (decode-time policies "
                                 "step through each; each operation's time grows with them: 64 fit make book's budget)",
                                 meaning="frontier tokens teacher-forced and scored after the prefill",
                                 allowed="≥ 1", check=tokens())
    retrieval_models: str = param("gemma3-270m,smollm2-135m", "models on the long-range retrieval test (a subset of "
                                  "models; \"\" for none; at 1,024 and 2,048 tokens, 24 + 12 prompts each, "
                                  "17 to 21 minutes of one core each)",
                                  meaning="models on the long-range retrieval test",
                                  allowed='a subset of `models`; `""` for none')
    retrieval_corpus: str = param("pydoc", "real-text haystack for RULER's magic-number needles: " + CORPUS_DOC,
                                  meaning="real-text haystack (RULER's magic-number needles)", allowed=CORPUS)
    retrieval_contexts: str | int = param("1024,2048", "prompt lengths in tokens, each a separate test (2048 costs "
                                          "1.5 to 1.9 times 1024 per question)",
                                          meaning="retrieval prompt lengths (tokens)",
                                          allowed="integers ≥ 128 separated by commas, within the model's context",
                                          check=integers)
    retrieval_prompts: int = param(24, "real-text questions per context (depths taken in turn: 8 per depth)",
                                   meaning="real-text questions per context", allowed="≥ 1", check=at_least(1))
    filler_prompts: int = param(12, "pass-key questions per context in the repeated filler (the easy control; 0: none)",
                                meaning="pass-key questions per context in the filler (0: none)", allowed="≥ 0",
                                check=at_least(0))
    retrieval_depths: str | float = param("0.1,0.5,0.9", "where the needle sits, as shares of the haystack",
                                  meaning="needle depths (shares of the haystack)",
                                  allowed="numbers strictly between 0 and 1, separated by commas", check=depths)
    results_dir: str = chapter_results_dir()
    device: str = torch_device()


@dataclass(frozen=True)
class Chapter5Parameters(Declared):
    NOTEBOOK = "05_qwen3_switch"
    EXAMPLE = "-p models Qwen/Qwen3-0.6B"

    models: str = param("qwen2.5-0.5b", "causal models: registry keys (qwen2.5-0.5b, the chapter's Qwen; add smollm2-135m "
                        "for a second family, about 15 minutes more), Hugging Face ids (e.g. Qwen/Qwen3-0.6B where its "
                        "weights exist) or local paths",
                        meaning="causal models (`qwen2.5-0.5b`: the chapter's Qwen, a Qwen2)",
                        allowed="registry keys, hub ids (`Qwen/Qwen3-0.6B` where its weights exist), local dirs")
    task: str = param("continuation", '"continuation" (does passage B continue passage A?) or "senses" (name the sense of '
                      "an ambiguous word)", meaning="what the adapters learn after the marker",
                      allowed="`continuation` (does passage B continue passage A?), `senses` (name the sense of an "
                              "ambiguous word)", check=one_of(TASKS))
    k_values: str | int = param("4,8,12", "depths of the LoRA tails (and activated adapters) to train: adapted layers at "
                                'the top, "L" for every layer',
                                meaning="depths of the LoRA tails and of the activated adapters (one of each per k)",
                                allowed="integers 1…L, or `L` (every layer)")
    rank: int = param(16, "LoRA rank r, at least 1", meaning="LoRA rank and scaling", allowed="rank ≥ 1", check=lora_rank)
    alpha: float = param(32, "LoRA scaling alpha (the update is scaled by alpha / r)", row="rank", check=lora_alpha)
    targets: str = param("q,k,v,o,mlp", "projections each adapted layer gets: any of q, k, v, o, mlp",
                         meaning="projections adapted", allowed="any of `q`, `k`, `v`, `o`, `mlp`")
    steps: str | int = param(96, "AdamW steps per adapter: one number, or a default then model:steps pairs",
                             meaning="AdamW training (the seed also draws the examples)",
                             allowed="`steps`, `lr`: one number, or a default then `model:value` pairs")
    lr: str | float = param("0.003,gemma3-270m:0.001,qwen2.5-0.5b:0.0005", "AdamW learning rate: one number, or a "
                            "default then model:rate pairs (Gemma 3 diverges at 0.003, the Qwen's 12-layer tail "
                            "trained in float32 at 0.002)", row="steps")
    batch_size: int = param(16, "training examples per step", row="steps", check=at_least(1))
    schedule: str = param("cosine", 'learning rate over the steps: "cosine" (a linear warm-up, then a cosine decay to 0) '
                          'or "constant"', row="steps", check=one_of(SCHEDULES))
    warmup: int = param(10, "steps of linear warm-up (schedule cosine)", row="steps", check=at_least(0))
    loss: str = param("answers", 'training loss: "answers" (cross-entropy of the right answer against the wrong one: '
                      'ln 2 for a coin) or "vocab" (the answer token against the whole vocabulary)', row="steps",
                      check=one_of(LOSSES))
    max_grad_norm: float = param(1.0, "each step's gradient is scaled down to this norm where it is larger (0: no "
                                 "clipping)", row="steps", check=lambda name, value: checks.check_number(name, value, 0, 1e6))
    train_dtype: str = param("auto", 'training precision: "auto" (bfloat16 autocast where the device multiplies bfloat16 '
                             'natively, else float32), "float32" or "bfloat16"',
                             meaning="precision of training (evaluation keeps `dtype`)",
                             allowed="`auto` (bfloat16 autocast where the device multiplies bfloat16 natively: a CPU with "
                                     "AVX512-BF16/AMX, a CUDA GPU; else float32), `float32`, `bfloat16`")
    seed: int = param(0, "seeds the examples, adapter initialisation and batch order", row="steps", check=seed_bits)
    marker: str = param("", "the switch marker, which invokes the activated adapters; empty: the marker of the task",
                        meaning="the switch marker (the activated adapters' invocation)", note="the task's own",
                        allowed="visible text that tokenises the same after the text", check=visible_marker)
    corpus: str = param("pydoc", "continuation: documents to train on (and, by default, to hold out every 4th of): "
                        '"pydoc", a folder of .txt files or a .jsonl file',
                        meaning="`continuation`: training documents; held-out documents",
                        allowed="`pydoc`, a folder of `.txt` files or a `.jsonl` file; no document in both")
    eval_corpus: str = param("", "continuation: held-out documents of another kind (a folder of .txt files or a .jsonl "
                             "file); empty: every 4th document of corpus", row="corpus",
                             note="every 4th document of `corpus`")
    passage_tokens: int = param(32, "continuation: tokens of passage A",
                                meaning="`continuation`: tokens of passage A and of passage B", allowed="≥ 4 each")
    candidate_tokens: int = param(24, "continuation: tokens of passage B", row="passage_tokens")
    n_train: int = param(1024, "continuation: training examples (even: half true continuations)",
                         meaning="`continuation`: training and held-out examples",
                         allowed="even, ≥ 2 (≥ 64 held out for a useful interval)")
    n_heldout: int = param(128, "continuation: held-out examples (even; at least 64 for a useful interval)", row="n_train")
    train_words: str = param("bank,bat,pitcher,mouse,spring,seal,plant,match,organ,pen,bark,palm",
                             "senses: words whose examples train the adapters",
                             meaning="`senses`: the train / held-out split of `senses_file`", shown="12 / 4 words",
                             allowed="disjoint words of `senses_file`")
    heldout_words: str = param("key,cell,club,fan", "senses: words never trained on (must not overlap train_words)",
                               row="train_words")
    senses_file: str = param("data/senses.json", "senses: the ambiguous words, their continuations, labels and reference "
                             "sentences", meaning="`senses`: the words, continuations and senses",
                             allowed="a file in that format")
    exact_examples: int = param(8, "held-out examples on which every policy is compared with the full recompute",
                                meaning="held-out examples on which every policy is compared with the full recompute",
                                allowed="1 … the held-out examples", check=at_least(1))
    patch_k: str | int = param(12, 'the tail (one of k_values, or "L") whose cache is patched',
                               meaning="the tail whose cache is patched; pairs of contexts (each cell's n: the pairs the "
                                       "unpatched adapter answers right); columns of the map",
                               allowed="one of `k_values`; ≥ 1 (at most the pairs the task gives: half the held-out "
                                       "examples for `continuation`); 1…L")
    patch_pairs: int = param(48, "pairs of contexts in the patching map (each cell's n: those the clean adapter answers "
                             "right)", row="patch_k", check=at_least(1))
    patch_layer_groups: int = param(4, "columns of the patching map: the layers in this many contiguous groups",
                                    row="patch_k", check=layers)
    bench_tokens: int = param(256, "prefix length of the cost benchmark (tokens of the default corpus)",
                              meaning="prefix length and repeats of the cost benchmark",
                              allowed="`bench_tokens` ≥ 8, `timing_repeats` ≥ 1", check=tokens(8))
    timing_repeats: int = param(6, "timed repetitions per policy (the median is reported; 6 is the fewest whose "
                                "paired test can reach p < 0.05)", row="bench_tokens",
                                check=at_least(1))
    dtype: str = param("float32", '"float32" or "float64"', meaning="precision of training, switching and scoring",
                       allowed="`float32`, `float64`", check=one_of(list(DTYPES)))
    results_dir: str = chapter_results_dir()
    device: str = torch_device(check=one_device)


# --------------------------------------------------------------------------- the summary pages


@dataclass(frozen=True)
class PageParameters(Declared):
    """A summary page reads the chapters' results; it loads no model."""

    results_dir: str = param("results", "the folder holding every chapter's results file (and bench.json)",
                             meaning="the folder whose results files (and `bench.json`) the page reads",
                             allowed="a folder holding every chapter's results")


@dataclass(frozen=True)
class ConclusionsParameters(PageParameters):
    NOTEBOOK = "06_conclusions"

    near_exact_pct: float = param(near_exact.NEAR_EXACT_PCT, "top-1 agreement (%) the guide tests each approximation "
                                  "against, per document: near-exact when the test puts it above, costly when below",
                                  meaning="top-1 agreement (%) the decision guide tests each approximation against (near-"
                                          "exact above it, costly below, no colour where the test does not separate)",
                                  allowed="0 < value ≤ 100", check=percentage)


@dataclass(frozen=True)
class AppendixAParameters(PageParameters):
    NOTEBOOK = "appendix_a_reproducibility"


@dataclass(frozen=True)
class AppendixBParameters(PageParameters):
    NOTEBOOK = "appendix_b_performance"


DECLARED = {c.NOTEBOOK: c for c in (Chapter1Parameters, Chapter2Parameters, Chapter3Parameters, Chapter4Parameters,
                                    Chapter5Parameters, ConclusionsParameters, AppendixAParameters, AppendixBParameters)}
