"""What a computation's code is: the import closure of its modules inside kvutils, found from the
code (every `import kvutils...` and `from kvutils... import ...`, at the top or inside a function),
and the repository's data files those modules name (`"data/<file>"` literals).

A study's results are reused only while its closure is unchanged (kvutils.studies.units): a change
to a module the study never imports (the report layer, the book's pages) leaves it standing, and a
change to one it imports, however deep, makes it compute again. Reading the code, not a hand-kept
list, is what keeps the two from drifting apart.
"""
from __future__ import annotations

import ast
import hashlib
import re
from functools import lru_cache
from pathlib import Path

PACKAGE = "kvutils"
DATA_FILE = re.compile(r"^data/[\w./-]+\.\w+$")  # a file of the repository's data/ folder, named in the code


def module_file(root: Path, module: str) -> Path | None:
    """The source file of `module` (a dotted name under kvutils) in the checkout `root`, or None."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package_of(root: Path, module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


@lru_cache(maxsize=4096)
def _parsed(source: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the dotted names a module imports, the data files it names), from its syntax tree; each text
    parsed once per process, wherever it lies (a checkout's copy parses as the original)."""
    tree = ast.parse(source)
    names, data = [], []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(("." * node.level) + (node.module or ""))
            names += [("." * node.level) + (f"{node.module}." if node.module else "") + alias.name
                      for alias in node.names]  # `from kvutils.x import y`: y may be a module
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and DATA_FILE.match(node.value):
            data.append(node.value)
    return tuple(names), tuple(data)


def _absolute(name: str, package: str) -> str:
    if not name.startswith("."):
        return name
    level = len(name) - len(name.lstrip("."))
    parts = package.split(".")
    base = parts[:len(parts) - level + 1]
    rest = name.lstrip(".")
    return ".".join([*base, rest] if rest else base)


def closure(roots: tuple[str, ...] | list[str], root: Path) -> tuple[list[Path], list[str]]:
    """(every kvutils source file the modules `roots` import, directly or not, with the packages
    that hold them; every "data/..." file those files name), each sorted. `root`: the checkout."""
    seen: dict[str, Path] = {}
    data: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen or not (module == PACKAGE or module.startswith(PACKAGE + ".")):
            continue
        path = module_file(root, module)
        if path is None:  # `from kvutils.x import name`: a name, not a module
            continue
        seen[module] = path
        parent = module.rpartition(".")[0]
        if parent:
            todo.append(parent)  # importing a.b.c runs a/__init__ and a/b/__init__
        names, files = _parsed(path.read_bytes())
        data.update(files)
        todo += [_absolute(name, _package_of(root, module, path)) for name in names]
    return sorted(set(seen.values())), sorted(data)


def digest_files(paths, root: Path) -> str:
    """One sha256 over files (their paths relative to `root` and their bytes; a missing one as such)."""
    h = hashlib.sha256()
    for path in paths:
        path = Path(path)
        h.update(str(path.relative_to(root) if path.is_absolute() else path).encode() + b"\0")
        full = path if path.is_absolute() else root / path
        h.update(full.read_bytes() if full.is_file() else b"(missing)")
        h.update(b"\0")
    return h.hexdigest()
