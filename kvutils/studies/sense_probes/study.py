"""Chapters 2 and 3: the same ambiguous word in two contexts, in causal models and in a
bidirectional encoder.

- Chapter 2 (`run_contrast`): how far the word's state and the prefix's keys move between the two
  contexts, layer by layer (a causal model's: not at all; an encoder's: more with depth).
- Chapter 3 (`run_probes`): a nearest-centroid sense probe at the old cached position, at a new
  position where the word is repeated, and at the encoder's original position; and where the new
  position's attention goes.

`plan()` takes the checked parameters (kvutils.studies.parameters) and tokenises every sentence
before any model loads.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from kvutils.core import data, results
from kvutils.models.checks import check_models
from kvutils.models.loading import load, load_tokenizer
from kvutils.studies.parameters.chapter2 import Chapter2Parameters
from kvutils.studies.parameters.chapter3 import Chapter3Parameters
from kvutils.studies.sense_probes import probes


@dataclass
class Plan:
    """Validated parameters of chapters 2 and 3, with every model's encoded sentences."""

    models: list[str]  # causal models
    encoders: list[str]  # bidirectional encoders
    words: list[data.Word]
    items: dict[str, list[probes.WordItems]]  # per model
    distance: str
    repeat_template: str
    batch_size: int
    device: str


def plan(p: Chapter2Parameters | Chapter3Parameters) -> Plan:
    """Prepare chapter 2 or 3 from its checked parameters: encode all sentences; loads tokenizers
    only. Raises ValueError / ModelNotAvailable naming the parameter and what is allowed."""
    causal = check_models("models", p.models, family="causal")
    encoders = check_models("encoder", p.encoder, family="encoder")
    words = data.load_senses(p.senses_file)
    items = {}
    for r in causal + encoders:
        tokenizer = load_tokenizer(r.name)
        data.check_words_for_tokenizer(words, tokenizer, r.name)
        items[r.name] = probes.build_items(tokenizer, words, p.repeat_template,
                                           with_repeats=r.family == "causal")
    return Plan([r.name for r in causal], [r.name for r in encoders], words, items, p.distance,
                p.repeat_template, p.batch_size, p.device)


def _layers_info(loaded) -> dict:
    return {"family": loaded.family, "layers": loaded.n_layers}


def run_contrast(p: Plan) -> tuple[dict, list[dict]]:
    """Chapter 2 for every model: numbers[model] = context_divergence + family and depth."""
    numbers, described = {}, []
    for name in p.models + p.encoders:
        loaded = load(name, "float32", device=p.device)
        described.append(loaded.describe())
        ws = probes.word_states(loaded, p.items[name], keys=True, batch_size=p.batch_size)
        numbers[name] = {**_layers_info(loaded), **probes.context_divergence(ws)}
        del loaded
    return numbers, described


def run_probes(p: Plan) -> tuple[dict, list[dict]]:
    """Chapter 3 for every model: numbers[model] = probe accuracies (+ attention split for causal
    models, read with eager attention), and what the first token (the sink) is."""
    numbers, described = {}, []
    for name in p.models + p.encoders:
        causal = name in p.models
        loaded = load(name, "float32", device=p.device, attn_implementation="eager" if causal else None)
        described.append(loaded.describe())
        ws = probes.word_states(loaded, p.items[name], attention=causal, batch_size=p.batch_size)
        first_token = loaded.tokenizer.convert_ids_to_tokens(p.items[name][0].contexts[0].ids[0])
        numbers[name] = {**_layers_info(loaded), "probe": probes.probe(ws, p.distance),
                         "first_token": first_token}
        if causal:
            numbers[name]["attention"] = probes.attention_split(ws)
        del loaded
    return numbers, described


def check_old_position_at_chance(numbers: dict) -> None:
    """A causal model's word state at its old position is the same under both senses, so a probe
    must score exactly 50% at every depth: anything else means the states differed."""
    for model, r in numbers.items():
        if r["family"] != "causal":
            continue
        off = {depth: acc for depth, acc in enumerate(r["probe"]["old_position_pct"]) if acc != 50.0}
        if off:
            raise AssertionError(f"{model}: old-position accuracy is not exactly 50% at depths {off}; "
                                 "the cached states must have differed between the two contexts")


def compute_contrast(p: Chapter2Parameters, folder, unit) -> None:
    """Chapter 2's unit of computation (kvutils.studies.units), written to its results file."""
    started = time.time()
    numbers, described = run_contrast(plan(p))
    results.save_results(folder, p.NOTEBOOK, p.as_dict(), described, results.as_written(numbers), started)


def compute_probes(p: Chapter3Parameters, folder, unit) -> None:
    """Chapter 3's unit of computation (kvutils.studies.units): the probes, checked at the old
    position (exactly 50 % at every depth), written to its results file."""
    started = time.time()
    numbers, described = run_probes(plan(p))
    check_old_position_at_chance(numbers)
    results.save_results(folder, p.NOTEBOOK, p.as_dict(), described, results.as_written(numbers), started)
