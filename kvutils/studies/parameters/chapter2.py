"""Chapter 2's parameters (notebooks/02_bert_contrast.ipynb): an encoder's vectors of an ambiguous word
beside a causal model's cached ones (the models, sentences and batches as chapter 3's)."""
from __future__ import annotations

from dataclasses import dataclass

from kvutils.core.declared import Declared
from kvutils.studies.parameters.shared import (
    chapter_results_dir,
    encoder_field,
    sense_models,
    sentence_batch,
    sentences_file,
    torch_device,
)
from kvutils.studies.sense_probes.templates import DEFAULT_REPEAT_TEMPLATE


@dataclass(frozen=True)
class Chapter2Parameters(Declared):
    NOTEBOOK = "02_bert_contrast"
    EXAMPLE = "-p encoder bert-base-uncased"
    # not parameters here: chapter 2 probes nothing, and repeats each word as chapter 3 does
    distance = "cosine"
    repeat_template = DEFAULT_REPEAT_TEMPLATE

    models: str = sense_models()
    encoder: str = encoder_field('bidirectional encoder(s), e.g. "bert-base-uncased" where its weights are '
                                 'in '
                                 "the local HF cache")
    senses_file: str = sentences_file()
    batch_size: int = sentence_batch()
    results_dir: str = chapter_results_dir()
    device: str = torch_device()
