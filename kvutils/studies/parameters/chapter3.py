"""Chapter 3's parameters (notebooks/03_sense_probes.ipynb): what the cached keys and values of an
ambiguous word hold (the models, sentences and batches as chapter 2's)."""
from __future__ import annotations

from dataclasses import dataclass

from kvutils.core.declared import Declared, param
from kvutils.studies.parameters.shared import (
    chapter_results_dir,
    encoder_field,
    sense_models,
    sentence_batch,
    sentences_file,
    torch_device,
)
from kvutils.studies.parameters.values import layers, one_of, template_with_word
from kvutils.studies.sense_probes.templates import DEFAULT_REPEAT_TEMPLATE, DISTANCES


@dataclass(frozen=True)
class Chapter3Parameters(Declared):
    NOTEBOOK = "03_sense_probes"
    EXAMPLE = "-p distance euclidean"

    models: str = sense_models()
    encoder: str = encoder_field('bidirectional encoder(s) for place (c), e.g. "bert-base-uncased" where its '
                                 "weights exist")
    senses_file: str = sentences_file()
    distance: str = param("cosine",
                          "the probe's distance to the sense centroids: \"cosine\" or \"euclidean\"",
                          meaning="the probe's distance to the sense centroids",
                          allowed="`cosine`, `euclidean`", check=one_of(DISTANCES))
    repeat_template: str = param(DEFAULT_REPEAT_TEMPLATE,
                                 "how the word is repeated at a new position; must contain {word}",
                                 meaning="how the word is repeated at a new position",
                                 allowed="a format string with `{prefix}` and `{word}` once each (plain "
                                         "fields); may add `{continuation}`", check=template_with_word)
    explorer_word: str = param("bank", "the sentence pair the explorer shows first (a word of senses_file)",
                               meaning="the pair the attention explorer shows first",
                               allowed="a word of `senses_file`")
    explorer_layer: int = param(2, "the layer (1-based) the explorer shows first",
                                meaning="the layer (1-based) it shows first",
                                allowed="≥ 1 (capped at the model's depth)", check=layers)
    batch_size: int = sentence_batch()
    results_dir: str = chapter_results_dir()
    device: str = torch_device()
