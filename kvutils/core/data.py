"""Study data: ambiguous words, garden paths, and a document corpus for prompts.

`senses.json` and `garden_paths.json` are contracts (readers pass their own with `-p senses_file`);
every loader validates its file and names the offending entries instead of skipping them.
"""
from __future__ import annotations

import codecs
import contextlib
import itertools
import json
import os
import re
import stat
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from kvutils.core.paths import link_loop, loop_error, resolve_path

DEFAULT_SENSES = "data/senses.json"
SENSES_PER_WORD = 2  # every ambiguous word has exactly two senses (load_senses checks it)
DEFAULT_GARDEN_PATHS = "data/garden_paths.json"
DEFAULT_CORPUS = "pydoc"  # CPython's language reference, installed with Python itself
PYDOC_MIN_CHARS = 2000  # the default corpus keeps the reference sections at least this long


# --------------------------------------------------------------------------- reading an input file
#
# Every input text file (a corpus's .txt and .jsonl, senses_file, garden_paths_file, accept's
# --docs) is opened here: regular files only, checked with stat before any open, so a named pipe,
# socket, device or folder named *.txt is refused by name instead of blocking a read forever (or,
# for /dev/zero, filling memory); opened non-blocking besides, in case the path is swapped between
# the check and the open. A file read whole has a size limit; a document is read to a prefix.

MAX_FILE_BYTES = 64 * 2**20  # a file read whole (senses_file, garden_paths_file) or one .jsonl line
DOC_PREFIX_BYTES = 2**20  # a corpus document is read only to here: ~200k tokens, far more than any run uses

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _kind(mode: int) -> str:
    return next((word for test, word in _KINDS if test(mode)), "not a regular file")


def _not_regular(parameter: str, shown, mode: int) -> ValueError:
    return ValueError(f"{parameter}: {shown} is {_kind(mode)}, not a regular file; give a text file")


def check_regular(path: str | Path, parameter: str, shown: str | Path | None = None) -> os.stat_result:
    """`path`'s stat (links followed) if it is a regular file; otherwise an error naming it and what it is."""
    shown = shown or path
    try:
        info = os.stat(path)
    except FileNotFoundError:
        kind = "a dangling symbolic link" if os.path.islink(path) else None
        raise ValueError(f"{parameter}: {shown} is {kind}" if kind else f"{parameter}: file not found: "
                                                                        f"{shown}") from None
    except OSError as err:
        loop = link_loop(path)
        if loop is not None:
            raise loop_error(parameter, shown, loop) from None
        raise ValueError(f"{parameter}: cannot read {shown} ({err.strerror or err})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(parameter, shown, info.st_mode)
    return info


@contextlib.contextmanager
def open_input(path: str | Path, parameter: str, shown: str | Path | None = None) -> Iterator[BinaryIO]:
    """A regular file opened for reading (binary), never blocking: see above."""
    shown = shown or path
    check_regular(path, parameter, shown)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise ValueError(f"{parameter}: cannot read {shown} ({err.strerror or err})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced by something else after the check
            raise _not_regular(parameter, shown, mode)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        yield fh


def _decode(raw: bytes, parameter: str, shown, first_line: int = 1, offset: int = 0,
            final: bool = True) -> str:
    """UTF-8 text (a BOM dropped); bytes that are not UTF-8, or a NUL, are an error naming the line
    and the byte. With `final=False` a character cut at the end of `raw` is left out."""
    try:
        text = codecs.getincrementaldecoder("utf-8-sig")().decode(raw, final=final)
    except UnicodeDecodeError as err:
        line = first_line + raw.count(b"\n", 0, err.start)
        raise ValueError(f"{parameter}: {shown} is not UTF-8 text (line {line}, byte {offset + err.start}: "
                         f"{raw[err.start:err.start + 1]!r}); save it as UTF-8") from None
    if "\x00" in text:  # valid UTF-8, but a binary file, not text
        line = first_line + text.count("\n", 0, text.index("\x00"))
        raise ValueError(f"{parameter}: {shown} is binary, not text (a NUL byte on line {line})")
    return text


def _too_big(parameter: str, shown, what: str, limit: int) -> ValueError:
    return ValueError(f"{parameter}: {shown}{what} is over the limit of {limit:,} bytes "
                      f"(kvutils.core.data.MAX_FILE_BYTES); give a smaller file")


def read_text(path: str | Path, parameter: str, shown: str | Path | None = None,
              limit: int | None = None) -> str:
    """A whole file's text, decoded strictly as UTF-8: bytes that are not (binary, Latin-1) are an
    error naming the file, the line and the byte, never replacement characters. A file over
    `limit` bytes (default MAX_FILE_BYTES) is an error naming the file and the limit."""
    shown, limit = shown or path, limit or MAX_FILE_BYTES
    with open_input(path, parameter, shown) as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise _too_big(parameter, shown, "", limit)
    return _decode(raw, parameter, shown)


def read_prefix(path: str | Path, parameter: str, shown: str | Path | None = None,
                limit: int | None = None) -> tuple[str, bool]:
    """The text of a file's first `limit` bytes (default DOC_PREFIX_BYTES; a character cut at the
    end left out), and whether the file went on beyond them."""
    shown, limit = shown or path, limit or DOC_PREFIX_BYTES
    with open_input(path, parameter, shown) as fh:
        raw = fh.read(limit + 1)
    cut = len(raw) > limit
    return _decode(raw[:limit], parameter, shown, final=not cut), cut


def read_lines(path: str | Path, parameter: str, shown: str | Path | None = None,
               limit: int | None = None) -> Iterator[tuple[int, str]]:
    """(number, text) of each line of a UTF-8 file, read one at a time; a line over `limit` bytes
    (default MAX_FILE_BYTES) is an error naming the file, the line and the limit."""
    shown, limit = shown or path, limit or MAX_FILE_BYTES
    with open_input(path, parameter, shown) as fh:
        offset = 0
        for number in itertools.count(1):
            raw = fh.readline(limit + 1)
            if not raw:
                return
            if len(raw) > limit:
                raise _too_big(parameter, shown, f" line {number}", limit)
            yield number, _decode(raw, parameter, shown, number, offset)
            offset += len(raw)


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


def _read_json(path: str | Path, parameter: str, top: str) -> dict:
    """A JSON file whose top level is an object with the key `top`."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise ValueError(f"{parameter} must be a file path, got {path!r}")
    file = resolve_path(path)
    if file.is_dir():
        raise ValueError(f"{parameter}: {path} is a folder; give the JSON file itself")
    try:
        raw = json.loads(read_text(file, parameter, path))
    except json.JSONDecodeError as err:
        raise ValueError(f"{parameter}: {path} is not valid JSON ({err})") from None
    if not isinstance(raw, dict):
        raise ValueError(f'{parameter}: {path} must hold a JSON object with "{top}", not a '
                         f'{type(raw).__name__}')
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
        if not isinstance(senses, list) or len(senses) != SENSES_PER_WORD:
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
    cut: bool = False  # the file went on beyond DOC_PREFIX_BYTES: `text` is its beginning


_RULE_LINE = re.compile(r"^\s*([*=~^-])\1{2,}\s*$", re.MULTILINE)


def _clean(text: str) -> str:
    return " ".join(_RULE_LINE.sub("", text).split())


def _prefix_of(text: str) -> tuple[str, bool]:
    """A .jsonl document's text cut as a .txt file's is (at DOC_PREFIX_BYTES bytes of UTF-8)."""
    limit = DOC_PREFIX_BYTES
    if len(text) <= limit // 4:  # at most 4 bytes a character: certainly within the limit
        return text, False
    raw = text.encode("utf-8")
    if len(raw) <= limit:
        return text, False
    return raw[:limit].decode("utf-8", errors="ignore"), True


def _txt_folder(path: Path, corpus, parameter: str) -> list[Document]:
    files = sorted(path.glob("*.txt"))
    if not files:
        raise ValueError(f"{parameter}: folder {corpus} holds no .txt files")
    for f in files:  # every file checked before any is read: a pipe named b.txt fails at once
        check_regular(f, parameter)
    docs = []
    for f in files:
        text, cut = read_prefix(f, parameter)
        docs.append(Document(f.name, _clean(text), cut))
    return docs


def _jsonl(path: Path, corpus, parameter: str) -> list[Document]:
    docs = []
    for n, line in read_lines(path, parameter, corpus):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            raise ValueError(f"{parameter}: {corpus} line {n} is not JSON") from None
        if not isinstance(record, dict) or "text" not in record:
            raise ValueError(f'{parameter}: {corpus} line {n} has no "text" field')
        if not isinstance(record["text"], str):
            raise ValueError(f'{parameter}: {corpus} line {n}: its "text" field is not a string '
                             f"(a JSON {_json_type(record['text'])}); give each document's text as one "
                             "string")
        text, cut = _prefix_of(record["text"])
        docs.append(Document(f"{path.name}:{n}", _clean(text), cut))
    if not docs:
        raise ValueError(f'{parameter}: {corpus} holds no documents (no line with a "text" field)')
    return docs


def _json_type(value) -> str:
    return {bool: "boolean", int: "number", float: "number", list: "list", dict: "object",
            type(None): "null"}.get(type(value), type(value).__name__)


def load_corpus(corpus: str = DEFAULT_CORPUS, parameter: str = "corpus") -> list[Document]:
    """Documents in a fixed order. `corpus` is "pydoc" (CPython's language reference sections of
    at least PYDOC_MIN_CHARS characters, sorted by name), a folder of .txt files, or a .jsonl file
    with a "text" field per line (e.g. the Pile's test split). Each document is read only to its
    first DOC_PREFIX_BYTES (`Document.cut` says where one went on)."""
    if not isinstance(corpus, (str, Path)) or not str(corpus).strip():
        raise ValueError(f'{parameter} must be "pydoc", a folder of .txt files or a .jsonl file, got '
                         f'{corpus!r}')
    if corpus == "pydoc":
        from pydoc_data.topics import topics

        docs = [Document(f"pydoc:{name}", _clean(text)) for name, text in sorted(topics.items())]
        return [d for d in docs if len(d.text) >= PYDOC_MIN_CHARS]
    path = resolve_path(corpus)
    loop = link_loop(path)
    if loop is not None:
        raise loop_error(parameter, corpus, loop)
    if path.is_dir():
        return _txt_folder(path, corpus, parameter)
    if path.suffix == ".jsonl" and (path.exists() or path.is_symlink()):
        return _jsonl(path, corpus, parameter)
    if not path.exists():
        raise ValueError(f'{parameter}: {corpus!r} does not exist; give "pydoc", a folder of .txt files '
                         "or a .jsonl file")
    raise ValueError(f'{parameter}: {corpus!r} is neither "pydoc", a folder of .txt files, '
                     "nor a .jsonl file")


FIRST_CHARS_PER_TOKEN = 16  # characters tokenised first per token needed; doubled until enough
TOKEN_MARGIN = 32  # tokens beyond those needed, so that the cut cannot change the ones kept


def first_tokens(tokenizer, text: str, length: int) -> list[int]:
    """The token ids of `text` (with the tokenizer's special tokens) up to `length` of them, or all
    if fewer: only a prefix of the text is tokenised, long enough that `length + TOKEN_MARGIN`
    tokens come out (a 200 MB document costs what a short one does)."""
    chars = max(FIRST_CHARS_PER_TOKEN * (length + TOKEN_MARGIN), 4096)
    while True:
        ids = tokenizer(text[:chars], add_special_tokens=True).input_ids
        if chars >= len(text) or len(ids) >= length + TOKEN_MARGIN:
            return ids[:length]
        chars *= 2


def cut_note(doc: Document) -> str:
    """Said after a document's token count where it may be short only because it was cut."""
    return f", read only to its first {DOC_PREFIX_BYTES:,} bytes" if doc.cut else ""


def check_corpus_size(docs: list[Document], n_docs: int, parameter: str = "n_prompts") -> None:
    if n_docs < 1:
        raise ValueError(f"{parameter} must be at least 1, got {n_docs}")
    if n_docs > len(docs):
        raise ValueError(f"{parameter}={n_docs}, but the corpus supplies only {len(docs)} documents")


def prompts_from_corpus(tokenizer, docs: list[Document], n: int, length: int,
                        parameter: str = "prompt_tokens"):
    """The first `length` tokens of each of the first `n` documents, as (n, length) token ids.
    A document shorter than `length` tokens is an error naming it, never a silent skip."""
    import torch

    check_corpus_size(docs, n)
    rows, short = [], []
    for doc in docs[:n]:
        ids = first_tokens(tokenizer, doc.text, length)
        if len(ids) < length:
            short.append(f"{doc.id} ({len(ids)} tokens{cut_note(doc)})")
        rows.append(ids[:length])
    if short:
        raise ValueError(f"{parameter}={length}: documents too short: {', '.join(short)}")
    return torch.tensor(rows)
