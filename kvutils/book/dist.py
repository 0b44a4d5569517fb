"""The built book as one archive a reader opens offline: `make dist` packs _build/html into
dist/kv-cache-book-<commit>.zip, its pages under one folder of the archive's name (unzip, then open
<folder>/index.html; the pages link to each other and to _static/ by relative paths).

    python -m kvutils.book.dist _build/html dist/kv-cache-book-<commit>.zip
"""
from __future__ import annotations

import argparse
import os
import sys
import zipfile
from pathlib import Path


def pack(html: str | Path, archive: str | Path) -> Path:
    """Zip every file under `html` into `archive` (written whole, then renamed into place), under
    a top folder named as the archive; an error naming `html` if it holds no built book."""
    html, archive = Path(html), Path(archive)
    if not (html / "index.html").is_file():
        raise ValueError(f"html: {html} has no index.html; build the book first (make book, or make html "
                         "after make book's jobs)")
    if archive.suffix != ".zip":
        raise ValueError(f"archive: {archive} must end in .zip")
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
    try:
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_DEFLATED) as z:
            for path in sorted(p for p in html.rglob("*") if p.is_file()):
                z.write(path, f"{archive.stem}/{path.relative_to(html).as_posix()}")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvutils.book.dist", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("html", help="the built book (_build/html)")
    parser.add_argument("archive", help="the .zip to write")
    args = parser.parse_args(argv)
    try:
        archive = pack(args.html, args.archive)
    except ValueError as err:
        parser.error(str(err))
    size = archive.stat().st_size / 2**20
    print(f"{archive}: {size:.1f} MiB; unzip it and open {archive.stem}/index.html in a browser (offline)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
