"""A rerun notebook as a page: its HTML, and what a reader sees of it.

    python -m kvutils.book.page runs/01_cache_exactness.ipynb [-o runs/01_cache_exactness.html]

writes the executed notebook as one HTML page with nbconvert: code hidden, cells tagged remove-cell
or remove-input dropped as the book drops them, MyST dropdowns and admonitions of the markdown made
HTML <details> and boxes. `visible_prose` and `sentence_lengths` measure what a reader sees without
opening anything: markdown and displayed outputs, outside tables and collapsed blocks.
"""
from __future__ import annotations

import argparse
import html
import re
import statistics
from pathlib import Path

_FENCE = re.compile(r"^:::\{(dropdown|admonition)\}[ \t]*(.*?)\n((?::class:.*\n)?)(.*?)^:::[ \t]*$",
                    re.M | re.S)
_DETAILS = re.compile(r"<details\b.*?</details>", re.S)
_HTML_TABLE = re.compile(r"<table\b.*?</table>", re.S)
_SCRIPT = re.compile(r"<(script|style)\b.*?</\1>", re.S)
_TAG = re.compile(r"<[^>]+>")
_BLOCK_END = re.compile(r"</(p|li|div|h\d)>")  # a paragraph, bullet or box ends: so does its sentence
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"“(*]*[A-Z0-9(])")


def myst_to_html(markdown: str) -> str:
    """The MyST dropdowns and admonitions of a markdown cell as HTML that any Markdown renderer
    shows: a collapsed <details> block, an admonition <div>."""
    def block(m: re.Match) -> str:
        kind, title, body = m.group(1), html.escape(m.group(2).strip()), m.group(4).strip("\n")
        if kind == "dropdown":
            return f"<details><summary>{title}</summary>\n\n{body}\n\n</details>"
        return f'<div class="admonition"><p class="admonition-title">{title}</p>\n\n{body}\n\n</div>'
    return _FENCE.sub(block, markdown)


def _shown(cell) -> bool:
    tags = cell.get("metadata", {}).get("tags", [])
    return "remove-cell" not in tags and "remove-output" not in tags


def visible_prose(notebook) -> str:
    """The words a reader sees without opening anything: markdown cells and displayed outputs
    (HTML where there is one), without tables, collapsed blocks, code or stream outputs."""
    parts = []
    for cell in notebook["cells"]:
        if not _shown(cell):
            continue
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])  # a list of lines as saved, or one string
            text = _FENCE.sub(lambda m: "" if m.group(1) == "dropdown" else m.group(4), source)
            parts.append("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("|")))
            continue
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            shown = data.get("text/html") or data.get("text/markdown")
            if out.get("output_type") in ("display_data", "execute_result") and shown:
                shown = "".join(shown) if isinstance(shown, list) else shown
                shown = _HTML_TABLE.sub(" ", _DETAILS.sub(" ", shown))
                shown = _TAG.sub(" ", _BLOCK_END.sub("\n\n", _SCRIPT.sub(" ", shown)))
                parts.append(html.unescape(shown))
    text = "\n\n".join(parts)
    text = re.sub(r"^#+\s*(.*)$", r"\1.", text, flags=re.M)  # a heading reads as one sentence
    return re.sub(r"[*_`]", "", text)


def sentence_lengths(text: str) -> list[int]:
    """Words per sentence; a sentence ends at '.', '!' or '?' before a capital or a digit, or at a
    paragraph's end."""
    lengths = []
    for paragraph in re.split(r"\n\s*\n", text):
        for sentence in _SENTENCE_END.split(" ".join(paragraph.split())):
            words = len(sentence.split())
            if words:
                lengths.append(words)
    return lengths


def measure(notebook) -> dict:
    """{words, sentences, median, longest} of a notebook's visible prose."""
    text = visible_prose(notebook)
    lengths = sentence_lengths(text)
    return {"words": len(text.split()), "sentences": len(lengths),
            "median": statistics.median(lengths) if lengths else 0, "longest": max(lengths, default=0)}


def to_html(notebook_path: str | Path, output: str | Path | None = None) -> Path:
    """Write the executed notebook as an HTML page (code hidden, as the book shows it)."""
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    source = Path(notebook_path)
    if not source.is_file():
        raise FileNotFoundError(f"notebook: {source} does not exist; give an executed .ipynb (e.g. "
                                "runs/x.ipynb)")
    notebook = nbformat.read(source, as_version=4)
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = myst_to_html(cell.source)
    remove = TagRemovePreprocessor(remove_cell_tags={"remove-cell"}, remove_input_tags={"remove-input"},
                                   remove_all_outputs_tags={"remove-output"})
    exporter = HTMLExporter(exclude_input=True, exclude_input_prompt=True, exclude_output_prompt=True)
    exporter.register_preprocessor(remove, enabled=True)
    body, _ = exporter.from_notebook_node(notebook)
    target = Path(output) if output else source.with_suffix(".html")
    partial = target.with_suffix(".html.partial")
    partial.write_text(body, encoding="utf-8")
    partial.replace(target)  # atomic: a failed export leaves the previous page
    return target


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kvutils.book.page", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", help="an executed notebook, e.g. runs/01_cache_exactness.ipynb")
    parser.add_argument("-o", "--output", help="the HTML file (default: beside the notebook, .html)")
    args = parser.parse_args(argv)
    print(to_html(args.notebook, args.output))


if __name__ == "__main__":
    main()
