"""What chapters 2 and 3 take as text: the probe's distances and the template that repeats a word,
with its check. No torch here: a notebook's first cell and the chapters runner check
`repeat_template` and `distance` with it before anything heavy loads (kvutils.studies.parameters)."""
from __future__ import annotations

import string

DISTANCES = ("cosine", "euclidean")
DEFAULT_REPEAT_TEMPLATE = "{prefix}{continuation} The {word}"
CONTEXT_TEMPLATE = "{prefix}{continuation}"
REPEAT_FIELDS = ("prefix", "continuation", "word")



def check_repeat_template(template: str, parameter: str = "repeat_template") -> str:
    """The template must name {prefix} (where the word first occurs) and {word} (its new position)
    once each, and may add {continuation}; plain fields only (no !r or :spec)."""
    if not isinstance(template, str):
        raise ValueError(f"{parameter} must be a string, got {template!r}")
    try:
        parsed = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(template) if f is not None]
    except ValueError as err:
        raise ValueError(f"{parameter}: {template!r} is not a format string ({err})") from None
    fields = [f for f, _, _ in parsed]
    decorated = [f for f, spec, conv in parsed if spec or conv]
    if decorated:
        raise ValueError(f"{parameter}: {template!r} formats {decorated}; write plain fields such as "
                         "{word}, without !conversions or :specs")
    unknown = sorted(set(fields) - set(REPEAT_FIELDS))
    if unknown:
        raise ValueError(f"{parameter}: unknown field(s) {unknown} in {template!r}; "
                         f"allowed: {{prefix}}, {{continuation}}, {{word}}")
    if fields.count("word") != 1:
        raise ValueError(f"{parameter}: {template!r} must contain {{word}} exactly once (the word's "
                         f"new position), e.g. {DEFAULT_REPEAT_TEMPLATE!r}")
    if fields.count("prefix") != 1:
        raise ValueError(f"{parameter}: {template!r} must contain {{prefix}} exactly once (where the word "
                         "first occurs, whose cached state the probe reads), e.g. "
                         f"{DEFAULT_REPEAT_TEMPLATE!r}")
    return template
