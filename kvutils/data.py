"""Study data: ambiguous words, garden paths, and a document corpus for prompts.

`senses.json` and `garden_paths.json` are contracts (readers pass their own with `-p senses_file`);
every loader validates its file and names the offending entries instead of skipping them.
"""
from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path

import torch

from .paths import resolve_path

DEFAULT_SENSES = "data/senses.json"
DEFAULT_GARDEN_PATHS = "data/garden_paths.json"
DEFAULT_CORPUS = "pydoc"  # CPython's language reference, installed with Python itself
PYDOC_MIN_CHARS = 2000  # the default corpus keeps the reference sections at least this long


# --------------------------------------------------------------------------- senses and garden paths


@dataclass(frozen=True)
class Sense:
    label: str
    continuation: str
    references: tuple[str, ...]


@dataclass(frozen=True)
class Word:
    word: str
    prefix: str  # "The bank"
    senses: tuple[Sense, ...]


def read_text(path: str | Path, parameter: str, shown: str | Path | None = None) -> str:
    """A file's text, decoded strictly as UTF-8: bytes that are not (binary, Latin-1) are an error
    naming the file, the line and the byte, never replacement characters."""
    shown = shown or path
    try:
        raw = Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"{parameter}: cannot read {shown} ({err.strerror or err})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{parameter}: {shown} is not UTF-8 text (line {line}, byte {err.start}: "
                         f"{raw[err.start:err.start + 1]!r}); save it as UTF-8") from None
    if "\x00" in text:  # valid UTF-8, but a binary file, not text
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise ValueError(f"{parameter}: {shown} is binary, not text (a NUL byte on line {line})")
    return text


def _read_json(path: str | Path, parameter: str, top: str) -> dict:
    """A JSON file whose top level is an object with the key `top`."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise ValueError(f"{parameter} must be a file path, got {path!r}")
    file = resolve_path(path)
    if file.is_dir():
        raise ValueError(f"{parameter}: {path} is a folder; give the JSON file itself")
    if not file.is_file():
        raise ValueError(f"{parameter}: file not found: {path}")
    try:
        raw = json.loads(read_text(file, parameter, path))
    except json.JSONDecodeError as err:
        raise ValueError(f"{parameter}: {path} is not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ValueError(f'{parameter}: {path} must hold a JSON object with "{top}", not a {type(raw).__name__}')
    return raw


def _only_word_field(template: str) -> bool:
    try:
        fields = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
    except ValueError:
        return False
    return fields == [("word", "", None)]


def load_senses(path: str | Path = DEFAULT_SENSES, parameter: str = "senses_file") -> list[Word]:
    """Read and check the format of a senses file (see data/senses.json)."""
    raw = _read_json(path, parameter, "words")
    problems = []
    template = raw.get("prefix_template")
    if not isinstance(template, str) or not _only_word_field(template):
        problems.append('"prefix_template" must be a string whose one field is "{word}", e.g. "The {word}"')
        template = "{word}"
    entries = raw.get("words")
    if not isinstance(entries, list) or not entries:
        problems.append('"words" must be a non-empty list')
        entries = []
    words = []
    for i, entry in enumerate(entries):
        where = f"words[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("word"), str) or not entry["word"]:
            problems.append(f'{where}: needs a non-empty "word"')
            continue
        where = f"word {entry['word']!r}"
        if any(w.word == entry["word"] for w in words):
            problems.append(f"{where}: given twice (each word once)")
            continue
        senses = entry.get("senses")
        if not isinstance(senses, list) or len(senses) != 2:
            problems.append(f'{where}: needs exactly two "senses"')
            continue
        parsed = []
        for s in senses:
            ok = (isinstance(s, dict) and isinstance(s.get("label"), str)
                  and isinstance(s.get("continuation"), str) and s["continuation"]
                  and isinstance(s.get("references"), list) and len(s["references"]) >= 1
                  and all(isinstance(r, str) for r in s["references"]))
            if not ok:
                problems.append(f'{where}: each sense needs "label", a non-empty "continuation" '
                                'and a list of at least one "references" sentence')
                break
            parsed.append(Sense(s["label"], s["continuation"], tuple(s["references"])))
        else:
            if parsed[0].label == parsed[1].label:
                problems.append(f"{where}: the two senses share the label {parsed[0].label!r}")
            words.append(Word(entry["word"], template.format(word=entry["word"]), tuple(parsed)))
    if problems:
        raise ValueError(f"{parameter}: {path} is malformed:\n  " + "\n  ".join(problems))
    return words


def check_words_for_tokenizer(words: list[Word], tokenizer, model_name: str,
                              parameter: str = "senses_file") -> None:
    """Every word must be one token (with its leading space) and occur as that token in each of
    its reference sentences; otherwise raise listing every offender."""
    problems = []
    for w in words:
        ids = tokenizer(" " + w.word, add_special_tokens=False).input_ids
        if len(ids) != 1:
            problems.append(f"{w.word!r} is {len(ids)} tokens for {model_name}, not 1")
            continue
        for sense in w.senses:
            for ref in sense.references:
                if ids[0] not in tokenizer(ref, add_special_tokens=False).input_ids:
                    problems.append(f"{w.word!r} ({sense.label}) does not occur as the token "
                                    f"{w.word!r} in the reference {ref!r}")
    if problems:
        raise ValueError(f"{parameter}: words unusable with {model_name}:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class GardenPath:
    prefix: str
    continuations: tuple[str, str]


def load_garden_paths(path: str | Path = DEFAULT_GARDEN_PATHS,
                      parameter: str = "garden_paths_file") -> list[GardenPath]:
    raw = _read_json(path, parameter, "garden_paths")
    items = raw.get("garden_paths")
    problems = []
    if not isinstance(items, list):
        problems.append('"garden_paths" must be a list')
        items = []
    out = []
    for i, item in enumerate(items):
        conts = item.get("continuations") if isinstance(item, dict) else None
        if (not isinstance(item, dict) or not isinstance(item.get("prefix"), str) or not item["prefix"]
                or not isinstance(conts, list) or len(conts) != 2
                or not all(isinstance(c, str) and c for c in conts)):
            problems.append(f'garden_paths[{i}]: needs a non-empty "prefix" and exactly two non-empty '
                            '"continuations"')
            continue
        out.append(GardenPath(item["prefix"], (conts[0], conts[1])))
    if problems:
        raise ValueError(f"{parameter}: {path} is malformed:\n  " + "\n  ".join(problems))
    return out


@dataclass(frozen=True)
class PrefixPair:
    """A prefix and two continuations that give it different readings."""

    name: str
    prefix: str
    continuations: tuple[str, str]


def prefix_pairs(words: list[Word], garden_paths: list[GardenPath]) -> list[PrefixPair]:
    """The article's 18 items: 16 "The <word>" prefixes and 2 garden-path prefixes."""
    pairs = [PrefixPair(w.word, w.prefix, (w.senses[0].continuation, w.senses[1].continuation))
             for w in words]
    pairs += [PrefixPair(g.prefix, g.prefix, g.continuations) for g in garden_paths]
    return pairs


# --------------------------------------------------------------------------- documents


@dataclass(frozen=True)
class Document:
    id: str
    text: str


_RULE_LINE = re.compile(r"^\s*([*=~^-])\1{2,}\s*$", re.MULTILINE)


def _clean(text: str) -> str:
    return " ".join(_RULE_LINE.sub("", text).split())


def load_corpus(corpus: str = DEFAULT_CORPUS, parameter: str = "corpus") -> list[Document]:
    """Documents in a fixed order. `corpus` is "pydoc" (CPython's language reference sections of
    at least PYDOC_MIN_CHARS characters, sorted by name), a folder of .txt files, or a .jsonl file
    with a "text" field per line (e.g. the Pile's test split)."""
    if not isinstance(corpus, (str, Path)) or not str(corpus).strip():
        raise ValueError(f'{parameter} must be "pydoc", a folder of .txt files or a .jsonl file, got {corpus!r}')
    if corpus == "pydoc":
        from pydoc_data.topics import topics

        docs = [Document(f"pydoc:{name}", _clean(text)) for name, text in sorted(topics.items())]
        return [d for d in docs if len(d.text) >= PYDOC_MIN_CHARS]
    path = resolve_path(corpus)
    if path.is_dir():
        files = sorted(path.glob("*.txt"))
        if not files:
            raise ValueError(f"{parameter}: folder {corpus} holds no .txt files")
        return [Document(f.name, _clean(read_text(f, parameter))) for f in files]
    if path.is_file() and path.suffix == ".jsonl":
        docs = []
        for n, line in enumerate(read_text(path, parameter, corpus).splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{parameter}: {corpus} line {n} is not JSON") from None
            if not isinstance(record, dict) or not isinstance(record.get("text"), str):
                raise ValueError(f'{parameter}: {corpus} line {n} has no "text" field')
            docs.append(Document(f"{path.name}:{n}", _clean(record["text"])))
        if not docs:
            raise ValueError(f'{parameter}: {corpus} holds no documents (no line with a "text" field)')
        return docs
    if not path.exists():
        raise ValueError(f'{parameter}: {corpus!r} does not exist; give "pydoc", a folder of .txt files '
                         "or a .jsonl file")
    raise ValueError(f'{parameter}: {corpus!r} is neither "pydoc", a folder of .txt files, '
                     "nor a .jsonl file")


def check_corpus_size(docs: list[Document], n_docs: int, parameter: str = "n_prompts") -> None:
    if n_docs < 1:
        raise ValueError(f"{parameter} must be at least 1, got {n_docs}")
    if n_docs > len(docs):
        raise ValueError(f"{parameter}={n_docs}, but the corpus supplies only {len(docs)} documents")


def prompts_from_corpus(tokenizer, docs: list[Document], n: int, length: int,
                        parameter: str = "prompt_tokens") -> torch.Tensor:
    """The first `length` tokens of each of the first `n` documents, as (n, length) token ids.
    A document shorter than `length` tokens is an error naming it, never a silent skip."""
    check_corpus_size(docs, n)
    rows, short = [], []
    for doc in docs[:n]:
        ids = tokenizer(doc.text, add_special_tokens=True).input_ids
        if len(ids) < length:
            short.append(f"{doc.id} ({len(ids)} tokens)")
        rows.append(ids[:length])
    if short:
        raise ValueError(f"{parameter}={length}: documents too short: {', '.join(short)}")
    return torch.tensor(rows)
