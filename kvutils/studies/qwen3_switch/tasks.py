"""Chapter 5's two tasks, each invoked by a marker after a prefix and answered by one of two tokens.

* `senses` — `"The <word><continuation>" + marker` -> the sense's label (" river"); adapters train
  on the contexts and reference sentences of some words and are scored on held-out words.
* `continuation` — passage A, a blank line, passage B, the marker -> " yes" if B is the text that
  follows A in the same document, " no" if B comes from another document. Every A is shown once
  with its true continuation and once with a passage of another document, so the classes are
  balanced and nothing in A alone tells the answer: the adapter must read both passages, i.e. the
  prefix the base model cached. Training and held-out examples come from different documents.

Everything here is tokenisation: no model loads.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from kvutils.core import data

TASKS = ("continuation", "senses")
MARKERS = {"senses": "\nSense:", "continuation": "\nDoes the second passage continue the first?"}
ANSWERS = (" yes", " no")  # continuation: the true continuation, a passage of another document
SEPARATOR = "\n\n"  # between passage A and passage B
CONTROL_BINS = 4  # control rows of the patch map: the shared prefix token by token, or in this many runs
CONTINUATION_BINS = 4  # rows of the patch map: what follows the shared prefix, in quarters


@dataclass(frozen=True)
class Example:
    group: str  # the word (senses) or the document of passage A (continuation)
    label: int  # senses: the sense (0/1); continuation: 0 the true continuation, 1 another document's
    kind: str  # senses: "context" / "reference"; continuation: "pair"
    ids: tuple[int, ...]  # the prefix's tokens, then the marker's
    target: int  # the right answer's token
    other: int  # the wrong answer's token


# --------------------------------------------------------------------------- senses


def label_token(tokenizer, word: data.Word, sense: data.Sense, name: str) -> int:
    ids = tokenizer(" " + sense.label, add_special_tokens=False).input_ids
    if len(ids) != 1:
        raise ValueError(f"senses_file: the label {sense.label!r} of {word.word!r} is {len(ids)} tokens for "
                         f"{name}; the answer must be one token (choose a one-token label)")
    return ids[0]


def senses_examples(tokenizer, words: list[data.Word], marker_ids: list[int], name: str) -> list[Example]:
    out = []
    for w in words:
        labels = [label_token(tokenizer, w, s, name) for s in w.senses]
        for s, sense in enumerate(w.senses):
            texts = [("context", w.prefix + sense.continuation)] + [("reference",
                                                                     r) for r in sense.references]
            for kind, text in texts:
                ids = tokenizer(text, add_special_tokens=True).input_ids + marker_ids
                out.append(Example(w.word, s, kind, tuple(ids), labels[s], labels[1 - s]))
    return out


# --------------------------------------------------------------------------- continuation


def answer_tokens(tokenizer, name: str) -> tuple[int, int]:
    ids = [tokenizer(a, add_special_tokens=False).input_ids for a in ANSWERS]
    if any(len(i) != 1 for i in ids):
        raise ValueError(f"models: the answers {ANSWERS} are not one token each for {name}")
    return ids[0][0], ids[1][0]


def _word_starts(tokenizer, ids: list[int]) -> list[int]:
    """Indices of the tokens that begin a word (a leading space: 'Ġ' in byte-level BPE, '▁' in
    SentencePiece), so that no passage starts or ends inside a word — a cut word would tell a true
    continuation from a foreign one without reading either passage."""
    tokens = tokenizer.convert_ids_to_tokens(ids)
    return [i for i, t in enumerate(tokens) if t[:1] in ("Ġ", "▁", " ")]


def _windows(tokenizer, docs: list[data.Document], a: int, b: int) -> list[tuple[list[int], ...]]:
    """Per document: its tokens; the starts of its non-overlapping A+B windows (A and B both start
    at a word start); the starts of the other, overlapping, windows (a short held-out corpus may
    need them); every word start from which b tokens fit (where a foreign B may come from)."""
    out = []
    for doc in docs:
        ids = tokenizer(doc.text, add_special_tokens=False).input_ids
        starts = _word_starts(tokenizer, ids)
        begins = set(starts)
        fits = [s for s in starts if s + a in begins and s + a + b <= len(ids)]
        apart, free = [], 0
        for s in fits:
            if s >= free:
                apart.append(s)
                free = s + a + b
        chosen = set(apart)
        out.append((ids, apart, [s for s in fits if s not in chosen],
                    [s for s in starts if s + b <= len(ids)]))
    return out


def continuation_examples(tokenizer, docs: list[data.Document], n: int, a: int, b: int, marker_ids: list[int],
                          seed: int, name: str, parameter: str) -> list[Example]:
    """`n` examples (n/2 passages A, each with its true continuation and with another document's
    passage), drawn round-robin over the documents so that every document contributes alike."""
    yes, no = answer_tokens(tokenizer, name)
    sep = tokenizer(SEPARATOR, add_special_tokens=False).input_ids
    bos = tokenizer("", add_special_tokens=True).input_ids
    windows = _windows(tokenizer, docs, a, b)
    usable = [i for i, (_, apart, _, _) in enumerate(windows) if apart]
    available = sum(len(apart) + len(rest) for _, apart, rest, _ in windows)
    if len(usable) < 2 or available < n // 2:
        raise ValueError(f"{parameter}: its {len(docs)} documents give {available} passages of {a} + {b} "
                         f"tokens for {name} (in {len(usable)} documents); {n // 2} are needed for {n} "
                         "examples, from at least two documents. Give more or longer documents, or lower "
                         "passage_tokens and candidate_tokens or the number of examples (n_train, "
                         "n_heldout).")
    rng, spare = random.Random(seed), random.Random(seed + 10_007)
    queues = {i: rng.sample(windows[i][1], len(windows[i][1])) for i in usable}
    overlapping = {i: spare.sample(windows[i][2], len(windows[i][2])) for i in usable}
    out: list[Example] = []
    turn = 0
    while len(out) < n:
        i = usable[turn % len(usable)]
        turn += 1
        # overlapping passages only once every document's separate ones are used up
        source = queues[i] if any(queues.values()) else overlapping[i]
        if not source:
            continue
        s = source.pop()
        ids = windows[i][0]
        j = rng.choice([u for u in usable if u != i])
        foreign_ids, foreign_starts = windows[j][0], windows[j][3]
        f = rng.choice(foreign_starts)
        passage = ids[s:s + a]
        for label, (cand, target, other) in enumerate(((ids[s + a:s + a + b], yes, no),
                                                       (foreign_ids[f:f + b], no, yes))):
            out.append(Example(docs[i].id, label, "pair", tuple(bos + passage + sep + cand + marker_ids),
                               target, other))
    return out


def split_documents(docs: list[data.Document], every: int = 4) -> tuple[list, list]:
    """Training and held-out documents: every `every`-th document (in the corpus's fixed order) is
    held out, so no document is in both."""
    return ([d for i, d in enumerate(docs) if i % every], [d for i, d in enumerate(docs) if not i % every])
