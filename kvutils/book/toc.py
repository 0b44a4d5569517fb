"""The book's table of contents with only the pages that exist: `make chapter` on a fresh clone
(one chapter computed, no summary pages yet) builds the HTML of what is there, under `-W`, instead
of failing on the toc's entries for pages never executed.

    python -m kvutils.book.toc OUT.yml   # writes the partial toc; prints which pages it left out
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

from kvutils.core.paths import REPO_ROOT

TOC = REPO_ROOT / "_toc.yml"


def _exists(entry: dict, root: Path) -> bool:
    base = root / entry["file"]
    return any(base.with_suffix(suffix).is_file() for suffix in (".ipynb", ".md"))


def partial_toc(toc: dict, root: Path = REPO_ROOT) -> tuple[dict, list[str]]:
    """`toc` (a jb-book _toc.yml) without the chapters whose file is missing, and without a part
    left empty: (the new toc, the files left out)."""
    left_out: list[str] = []
    parts = []
    for part in toc.get("parts", []):
        kept = [c for c in part["chapters"] if _exists(c, root)]
        left_out += [c["file"] for c in part["chapters"] if c not in kept]
        if kept:
            parts.append({**part, "chapters": kept})
    rest = {k: v for k, v in toc.items() if k != "parts"}
    return ({**rest, "parts": parts} if parts else rest), left_out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m kvutils.book.toc OUT.yml", file=sys.stderr)
        return 2
    toc, left_out = partial_toc(yaml.safe_load(TOC.read_text()))
    out = Path(argv[0])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(toc, sort_keys=False))
    if left_out:
        print(f"the HTML leaves out the pages not built yet ({', '.join(Path(f).name for f in left_out)}); "
              "make book builds every one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
