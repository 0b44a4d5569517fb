"""kvutils' layers, read from its source with `ast`: every import of one kvutils module by another
(inside functions too; only the body of an `if TYPE_CHECKING:` is exempt) is an edge of the module
graph, and the graph must have no cycle, no private name (`_x`) imported or used across modules,
no module over 450 lines, no function over 60, and no import from a higher layer, lowest first:

    core < models < cache < lora < studies < report < explorer < book

with kvutils/__init__.py and the command modules (kvutils/accept.py, ...) above them all. The
checker is tested on small packages made to break each rule; and `import kvutils` stays light."""
from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kvutils.core.paths import REPO_ROOT

LAYERS = ("core", "models", "cache", "lora", "studies", "report", "explorer", "book")  # lowest first
MAX_LINES = 450
MAX_FUNCTION_LINES = 60  # a function longer than this is split, one concern per function
RULES = ("cycles", "private names", "long modules", "long functions", "upward imports")


def module_files(package: Path) -> dict[str, Path]:
    """Every module of the package by its dotted name (a subpackage by its folder's, for its __init__.py)."""
    files = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def layer(module: str) -> int:
    """The rank of a module's layer; the package's own __init__ and its top-level modules rank above all."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def layer_name(module: str) -> str:
    return LAYERS[layer(module)] if layer(module) < len(LAYERS) else "top"


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
                                         or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_nodes(node: ast.AST):
    """Every import statement under `node`, wherever it stands, except in the body of `if TYPE_CHECKING:`."""
    for child in (node.orelse if _is_type_checking(node) else ast.iter_child_nodes(node)):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child
        else:
            yield from import_nodes(child)


def imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, files: dict[str, Path]):
    """(module imported, name taken from it or None, the local name a whole module is bound to or
    None) for each name of one import statement that is one of `files`."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            known = [m for m in files if alias.name == m or alias.name.startswith(m + ".")]
            if known:
                yield max(known, key=len), None, alias.asname
        return
    base = node.module or ""
    if node.level:  # relative: from the module's own package, one level up per extra dot
        package = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(package[:len(package) - node.level + 1] + ([node.module] if node.module else []))
    for alias in node.names:
        if f"{base}.{alias.name}" in files:
            yield f"{base}.{alias.name}", None, alias.asname or alias.name  # a submodule
        elif base in files:
            yield base, alias.name, None


def find_cycles(edges: dict[str, set[str]]) -> list[tuple[list[str], set[str]]]:
    """For each strongly connected part of the graph with more than one module (Tarjan's algorithm):
    one of its cycles (its modules in import order, the first again at the end) and the part."""
    index, low, stack, on_stack, parts = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                parts.append(part)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [(_cycle_through(min(part), part, edges), part) for part in parts]


def _cycle_through(start: str, part: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest way from `start` back to itself inside one strongly connected part."""
    came_from, frontier = {start: None}, [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges[v] & part):
                if w == start:
                    path = [v]
                    while came_from[path[-1]] is not None:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if w not in came_from:
                    came_from[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"{start} is on no cycle")


def _private(name: str | None) -> bool:
    return bool(name) and name.startswith("_") and not name.startswith("__")


def layering_problems(package: Path, max_lines: int = MAX_LINES) -> dict[str, list[str]]:
    """What breaks each rule in the package at `package` (a folder with __init__.py), by rule."""
    files = module_files(package)
    edges: dict[str, set[str]] = {m: set() for m in files}
    problems: dict[str, list[str]] = {rule: [] for rule in RULES}
    for module, path in files.items():
        source = path.read_text()
        if (lines := len(source.splitlines())) > max_lines:
            problems["long modules"].append(f"{module}: {lines} lines (at most {max_lines})")
        tree = ast.parse(source, str(path))
        problems["long functions"] += [
            f"{module}.{node.name} (line {node.lineno}): {node.end_lineno - node.lineno + 1} lines (at most "
            f"{MAX_FUNCTION_LINES})" for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
        modules_bound = {}  # local name -> the other kvutils module it is
        for node in import_nodes(tree):
            for target, name, bound in imported(module, path.name == "__init__.py", node, files):
                if target == module:
                    continue
                edges[module].add(target)
                modules_bound.update({bound: target} if bound else {})
                where = f"{module} (line {node.lineno})"
                if _private(name):
                    problems["private names"].append(f"{where} imports the private {name} from {target}")
                if layer(target) > layer(module):
                    problem = f"{where} imports {target}: {layer_name(target)} is above {layer_name(module)}"
                    if problem not in problems["upward imports"]:
                        problems["upward imports"].append(problem)
        for node in ast.walk(tree):  # `results._x` after `from kvutils.core import results`: the same rule
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr) \
                    and node.value.id in modules_bound:
                problems["private names"].append(f"{module} (line {node.lineno}) uses the private {node.attr} "
                                                 f"of {modules_bound[node.value.id]}")
    problems["cycles"] = [" -> ".join(cycle) + (f" (one cycle of those tying {', '.join(sorted(part))})"
                                                if len(part) > len(cycle) - 1 else "")
                          for cycle, part in find_cycles(edges)]
    return problems


# --------------------------------------------------------------------------- kvutils itself


@pytest.mark.parametrize("rule", RULES)
def test_kvutils_keeps_its_layers(rule):
    found = layering_problems(REPO_ROOT / "kvutils")[rule]
    assert not found, f"{rule}:\n  " + "\n  ".join(found)


def test_import_kvutils_is_light_and_its_names_resolve_when_used():
    script = textwrap.dedent("""
        import sys
        import kvutils
        heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
        assert not heavy, f"import kvutils imported {heavy}"
        assert callable(kvutils.load) and "kvutils.models.registry" in sys.modules and "torch" in sys.modules
        assert all(getattr(kvutils, name) is not None for name in kvutils.__all__)
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


# --------------------------------------------------------------------------- the checker can fail


def _package(root: Path, modules: dict[str, str]) -> Path:
    """A package `kvutils` under `root` with an __init__.py in every folder and the given modules."""
    package = root / "kvutils"
    for relative, source in modules.items():
        path = package / relative
        for folder in [package, *reversed(path.relative_to(package).parents[:-1])]:
            (package / folder).mkdir(parents=True, exist_ok=True)
            (package / folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(source))
    return package


def _found(tmp_path: Path, modules: dict[str, str]) -> dict[str, list[str]]:
    return {rule: found for rule, found in layering_problems(_package(tmp_path, modules)).items() if found}


def test_a_package_that_keeps_the_rules_passes(tmp_path):
    assert _found(tmp_path, {
        "core/a.py": "import os\n\n\ndef helper():\n    return os.sep\n",
        "models/b.py": "from kvutils.core import a\nfrom kvutils.core.a import helper\n",
        "cache/c.py": "from ..models import b\n\n\ndef later():\n    import kvutils.core.a\n",
        "accept.py": "from kvutils.cache.c import later\nimport kvutils\n",  # a command module: above all layers
        "core/d.py": "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from kvutils.cache.c import later\n",
        "core/e.py": "x = 1\n" * MAX_LINES,
    }) == {}


def test_a_cycle_is_caught_even_through_an_import_inside_a_function(tmp_path):
    found = _found(tmp_path, {
        "core/a.py": "from kvutils.core import b\n",
        "core/b.py": "def f():\n    from kvutils.core.c import g\n",
        "core/c.py": "import kvutils.core.a\n\n\ndef g():\n    pass\n",
    })
    assert found == {"cycles": ["kvutils.core.a -> kvutils.core.b -> kvutils.core.c -> kvutils.core.a"]}


def test_every_module_tied_into_cycles_is_named(tmp_path):
    found = _found(tmp_path, {"core/a.py": "from kvutils.core import b\n",
                              "core/b.py": "from kvutils.core import a, c\n",
                              "core/c.py": "from kvutils.core import b\n"})
    assert found == {"cycles": ["kvutils.core.a -> kvutils.core.b -> kvutils.core.a (one cycle of those tying "
                                "kvutils.core.a, kvutils.core.b, kvutils.core.c)"]}


def test_an_import_under_type_checking_makes_no_cycle_but_its_else_branch_does(tmp_path):
    modules = {"core/a.py": "from kvutils.core import b\n",
               "core/b.py": "import typing\n\nif typing.TYPE_CHECKING:\n    from kvutils.core import a\n"}
    assert _found(tmp_path / "exempt", modules) == {}
    modules["core/b.py"] += "else:\n    from kvutils.core import a\n"
    assert _found(tmp_path / "else", modules) == {"cycles": ["kvutils.core.a -> kvutils.core.b -> kvutils.core.a"]}


def test_a_private_name_from_another_module_is_caught(tmp_path):
    found = _found(tmp_path, {"core/a.py": "def _check():\n    pass\n\n\n__version__ = 1\n",
                              "core/b.py": "from kvutils.core.a import __version__, _check\n",
                              "core/c.py": "import kvutils.core.a as first\nfrom kvutils.core import a\n\n\n"
                                           "def f():\n    return first._check, a._check, a.__version__\n"})
    assert found == {"private names": ["kvutils.core.b (line 1) imports the private _check from kvutils.core.a",
                                       "kvutils.core.c (line 6) uses the private _check of kvutils.core.a",
                                       "kvutils.core.c (line 6) uses the private _check of kvutils.core.a"]}


def test_an_import_from_a_higher_layer_is_caught(tmp_path):
    found = _found(tmp_path, {
        "models/a.py": "def f():\n    from kvutils.report import b\n",
        "report/b.py": "",
        "core/c.py": "from ..book import d\n",
        "book/d.py": "from kvutils import load\n",  # the package's __init__ is above every layer
    })
    assert found == {"upward imports": [
        "kvutils.book.d (line 1) imports kvutils: top is above book",
        "kvutils.core.c (line 1) imports kvutils.book.d: book is above core",
        "kvutils.models.a (line 2) imports kvutils.report.b: report is above models",
    ]}


def test_a_function_over_the_limit_is_caught(tmp_path):
    body = "    x = 1\n" * (MAX_FUNCTION_LINES - 1)
    found = _found(tmp_path, {"core/f.py": f"def short():\n{body}\n\ndef long():\n{body}    y = 2\n"})
    assert found == {"long functions": [f"kvutils.core.f.long (line {MAX_FUNCTION_LINES + 3}): {MAX_FUNCTION_LINES + 1} "
                                        f"lines (at most {MAX_FUNCTION_LINES})"]}


def test_a_module_over_the_limit_is_caught(tmp_path):
    found = _found(tmp_path, {"core/long.py": "x = 1\n" * (MAX_LINES + 1), "core/short.py": "x = 1\n" * MAX_LINES})
    assert found == {"long modules": [f"kvutils.core.long: {MAX_LINES + 1} lines (at most {MAX_LINES})"]}
