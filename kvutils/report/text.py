"""Numbers and sentences as the book prints them: `fmt` and `fraction` for every number in the prose
(formatted from a results dict, never typed by hand), and what a page glues: plain texts, Markdown,
and findings with their key numbers in bold (`glue_page`, `glue_findings`)."""
from __future__ import annotations

import re
from dataclasses import dataclass


def fmt(value, digits: int = 6) -> str:
    """A number as the book prints it: integers as is, floats to `digits` significant digits."""
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return str(value)
    if value == 0:
        return "0"
    if 1e4 <= abs(value) < 1e12:  # 13,860 reads better than 1.386e+04
        return f"{value:,.0f}"
    text = f"{value:.{digits}g}"
    return f"{value:,.0f}" if "e+" in text else text  # 1,047 rather than 1.05e+03


def fraction(count: int, total: int) -> str:
    return f"{count}/{total}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 prompt', '12 prompts', '1,024 tokens'."""
    return f"{fmt(n)} {noun if n == 1 else plural or noun + 's'}"


def listed(items, noun: str, plural: str | None = None) -> str:
    """'depth 14', 'depths 12, 14'; 'context 1,024', 'contexts 1,024 and 2,048'."""
    words = [fmt(i) if isinstance(i, (int, float)) else str(i) for i in items]
    joined = words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else ""
    return f"{noun if len(words) == 1 else plural or noun + 's'} {joined}"


_NUMBER = re.compile(r"(?<![\w.\-−])[-−]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?:/\d+)?%?×?(?![\w])")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


_CLAUSE_END = re.compile(r"[;:.](?:\s|$)")


def clauses(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause of the text; a clause ends at ';', ':' or '.' before a space."""
    ends = [m.end() for m in _CLAUSE_END.finditer(text) if m.end() < len(text)] + [len(text)]
    return list(zip([0] + ends[:-1], ends))


def key_numbers(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause's key number: its first number outside parentheses. A clause
    whose numbers are all in parentheses (the details of a measurement) has none."""
    spans = []
    for start, end in clauses(text):
        clause = text[start:end]
        for m in _NUMBER.finditer(clause):
            before = clause[:m.start()]
            if before.count("(") == before.count(")"):
                spans.append((start + m.start(), start + m.end()))
                break
    return spans


def bold_numbers(text: str) -> str:
    """A glued finding as inline Markdown (for `{glue:md}`): the text escaped, and only each
    clause's key number (`key_numbers`) in bold, so that the page marks the measurement a sentence
    is about, not every number of a paragraph."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", text)
    out, done = [], 0
    for start, end in key_numbers(escaped):
        out += [escaped[done:start], f"**{escaped[start:end]}**"]
        done = end
    return "".join(out) + escaped[done:]


@dataclass(frozen=True)
class Markdown:
    """A glued text that is Markdown as it is (e.g. method names already in bold)."""

    text: str


@dataclass(frozen=True)
class Finding:
    """A glued finding: Markdown with its key numbers put in bold (`bold_numbers`)."""

    text: str


def glue_page(prefix: str, page: dict) -> None:
    """Glue every text of a page's `glue_page(numbers)` under `prefix` + its key: a plain string as
    text (`{glue}`), a `Markdown` as it is and a `Finding` with its numbers in bold (`{glue:md}`)."""
    from IPython.display import Markdown as Shown
    from myst_nb import glue

    for key, value in page.items():
        shown = (Shown(bold_numbers(value.text)) if isinstance(value, Finding) else
                 Shown(value.text) if isinstance(value, Markdown) else value)
        glue(f"{prefix}{key}", shown, display=False)


def glue_findings(prefix: str, texts: dict[str, str]) -> None:
    """Glue each text as a `Finding`: Markdown with its key numbers in bold (`{glue:md}`)."""
    glue_page(prefix, {key: Finding(text) for key, text in texts.items()})
