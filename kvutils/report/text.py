"""Numbers and sentences as the book prints them: `fmt` and `fraction` for every number in the prose
(formatted from a results dict, never typed by hand), and the appendices' notes glued as
literal Markdown (`glue_markdown`)."""
from __future__ import annotations

from kvutils.report.findings import escaped


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


def glue_markdown(prefix: str, texts: dict[str, str]) -> None:
    """Glue each sentence under `prefix` + its key as Markdown that shows it literally (`{glue:md}`):
    the appendices' notes. Nothing in them is bold; a page's bold is its findings' claims
    (kvutils.report.findings)."""
    from IPython.display import Markdown
    from myst_nb import glue

    for key, text in texts.items():
        glue(f"{prefix}{key}", Markdown(escaped(text)), display=False)
