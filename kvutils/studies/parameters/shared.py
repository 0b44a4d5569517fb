"""Parameters that several notebooks declare alike: each function returns one field (a fresh
`param`, since a dataclass field belongs to one class)."""
from __future__ import annotations

from kvutils.core.declared import param
from kvutils.studies.parameters.values import at_least, model_list, usable_device

CAUSAL = "causal registry keys, hub ids, local dirs"
CORPUS = "`pydoc`, a folder of `.txt`, a `.jsonl` with `text`"
CORPUS_DOC = ('"pydoc" (CPython\'s language reference), a folder of .txt files, or a .jsonl with a "text" '
              'field')


def chapter_results_dir():
    return param("results", "where results/{notebook}.json and figures/ are written",
                 meaning="where the results file and figures go",
                 note="a papermill run with other parameters: `runs/<notebook>-<time>`",
                 allowed="a writable folder, or one that can be created")


def torch_device(check=usable_device):
    return param("cpu", 'torch device, e.g. "cuda" where one exists', meaning="torch device",
                 allowed="`cpu`, `cuda`, `cuda:N`, `mps`, `xpu` where present, or `auto` (accelerate's "
                         '`device_map="auto"`: every accelerator, then the CPU; not chapter 5, which trains '
                         "on one device)", check=check)


def sense_models():
    return param("gemma3-270m,smollm2-135m",
                 "causal models: comma-separated registry keys, Hugging Face ids or local paths",
                 meaning="causal models", allowed=CAUSAL, check=model_list)


def encoder_field(doc: str):
    return param("minilm-l6", doc, meaning="bidirectional encoder(s) to contrast",
                 allowed="encoder keys, e.g. `bert-base-uncased` where its weights exist", check=model_list)


def sentences_file():
    return param("data/senses.json", "the ambiguous words, their two continuations and reference sentences",
                 meaning="ambiguous words, continuations, references",
                 allowed="a file in that format; every word one token for every model")


def sentence_batch():
    return param(32, "sentences per forward pass (right-padded)", meaning="sentences per forward pass",
                 allowed="≥ 1", check=at_least(1))
