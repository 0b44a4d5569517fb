"""A notebook's parameters, declared once: a frozen dataclass whose fields are the parameters.

From the one declaration come the notebook's `parameters` cell (papermill's interface, rewritten
from it by `python -m kvutils.book.parameters_cells --write`), the check of every single value
(each field's `check`, run when an instance is made, so before any model loads), the names a
`-p` may give, the defaults that decide where a run writes (kvutils.core.params), the
parameter table (CONTRIBUTING.md), and the `parameters` a results file records.

    @dataclass(frozen=True)
    class Chapter9Parameters(Declared):
        NOTEBOOK = "09_example"
        n_docs: int = param(16, "documents scored", meaning="documents", allowed="≥ 1", check=at_least(1))

A field's `doc` is its comment in the notebook's cell ("{notebook}" there names the notebook);
`meaning`, `allowed` and `note` (said after the default) are its row of the parameter table.
Fields that share a row name the row's first field as their `row` and leave `meaning` and `allowed` to it.
"""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields

from kvutils.core import params


def say_first(notebook: str, err: Exception) -> None:
    """In a kernel (where sys.stderr is the notebook's), one line on the kernel process's own
    stderr: papermill's terminal, where it comes before papermill's traceback. The kernel's
    tracebacks turn short (IPython's `%xmode Minimal`: the exception's line alone), so the
    cell's error, in the notebook and in papermill's message, is that line too."""
    if sys.__stderr__ is not None and sys.stderr is not sys.__stderr__:
        print(f"{notebook}: refused in its first cell: {err}", file=sys.__stderr__, flush=True)
        shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
        if shell is not None and hasattr(shell, "InteractiveTB"):
            shell.InteractiveTB.set_mode(mode="Minimal")

Check = Callable[[str, object], object]  # check(name, value) raises ValueError naming the parameter

SIMPLE = (str, int, float, bool, tuple)  # a default is one of these: never a mutable list or dict


def param(default, doc: str, *, meaning: str = "", allowed: str = "", note: str = "", shown: str = "",
          row: str = "", check: Check | None = None):
    """One parameter: its default, its comment in the cell, its row of the parameter table (`shown` replaces
    the
    row's default cell, its literals and notes), and the check of a value given for it."""
    if not isinstance(default, SIMPLE):
        raise TypeError(f"a parameter's default must be one of {[t.__name__ for t in SIMPLE]}, got "
                        f"{default!r}")
    return field(default=default, metadata={"doc": doc, "meaning": meaning, "allowed": allowed, "note": note,
                                            "shown": shown, "row": row, "check": check})


def literal(value) -> str:
    """A default as the cell writes it: strings in double quotes, as the notebooks always had them."""
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else repr(value)


def canonical(annotation: str, default, value):
    """A value as papermill or the runner may pass it, in the one form a results file records.

    papermill's command line turns `-p lr 0.001` into a float and `-p k_values 2` into an int, and
    its Python API (or a YAML file of parameters) passes lists as lists. A parameter declared
    `str | int` or `str | float` with a text default ("2,4,8", "0.003,gemma3-270m:0.001") is text:
    a number becomes its shortest text ("0.001", "2") and a list its items joined by commas. One
    with a number default (`steps`: 96 or "96,qwen2.5-0.5b:160"; `patch_k`: 8 or "L") keeps a
    number as it is, and a text that is one integer or a whole float (`-p steps 1e3`) becomes that
    integer. A float parameter takes an int (`-p alpha 16`) as a float. Anything else is returned
    unchanged, for the field's check to refuse, naming the value given."""
    kinds = {kind.strip() for kind in str(annotation).split("|")}
    if isinstance(value, bool):
        return value
    if isinstance(value, (list, tuple)) and "str" in kinds and value \
            and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        value = ",".join(v.strip() if isinstance(v, str) else _number_text(v) for v in value)
    if "str" in kinds and len(kinds) > 1:
        if isinstance(default, str) and isinstance(value, (int, float)):
            return _number_text(value)
        if isinstance(default, int) and isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return int(value)
        if isinstance(default, int) and isinstance(value, float) and value.is_integer():
            return int(value)  # `-p steps 1e3` (papermill reads a float): the whole number it is
    if kinds == {"float"} and isinstance(value, int):
        return float(value)
    return value


def _number_text(value: int | float) -> str:
    return repr(value) if isinstance(value, float) else str(value)  # repr: the shortest exact text, 0.001


@dataclass(frozen=True)
class ReadmeRow:
    names: str  # "`prefill`, `decode`"
    meaning: str
    default: str  # "`256`, `256`"
    allowed: str


class Declared:
    """The base of every declaration: a subclass is a frozen dataclass with a NOTEBOOK name and
    (optionally) the papermill example its cell's header shows."""

    NOTEBOOK = ""
    EXAMPLE = ""  # e.g. "-p models smollm2-135m -p n_prompts 8"

    def __post_init__(self):
        for f in fields(self):  # frozen: the canonical form replaces the given one before the checks
            object.__setattr__(self, f.name, canonical(f.type, f.default, getattr(self, f.name)))
        for f in fields(self):
            if f.metadata["check"] is not None:
                f.metadata["check"](f.name, getattr(self, f.name))
        self.check_together()

    def check_together(self) -> None:
        """The checks of several values that need no model or file (each value checked alone first);
        a declaration overrides it. Those that need a model are its study's `plan`."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def defaults(cls) -> dict:
        return {f.name: f.default for f in fields(cls)}

    def as_dict(self) -> dict:
        """{name: value} in declaration order: what the results file records."""
        return {name: getattr(self, name) for name in self.names()}

    @classmethod
    def cell_source(cls) -> str:
        """The exact text of the notebook's `parameters` cell."""
        header = "# Parameters (papermill overrides any of these" + (
            f": papermill ... {cls.EXAMPLE})" if cls.EXAMPLE
                                                                    else ")")
        lines = [f"{f.name} = {literal(f.default)}  # {f.metadata['doc'].replace('{notebook}', cls.NOTEBOOK)}"
                 for f in fields(cls)]
        return "\n".join([header, *lines])

    @classmethod
    def readme_rows(cls) -> list[ReadmeRow]:
        """One row per parameter, or per group of parameters that share one (in the order of each
        group's first field)."""
        groups: dict[str, list] = {}
        for f in fields(cls):
            groups.setdefault(f.metadata["row"] or f.name, []).append(f)
        rows = []
        for members in groups.values():
            lead = members[0].metadata
            default = lead["shown"] or ", ".join(f"`{literal(f.default)}`" + (
                f" ({f.metadata['note']})" if f.metadata["note"]
                                                                             else "") for f in members)
            rows.append(ReadmeRow(", ".join(f"`{f.name}`" for f in members), lead["meaning"], default,
                                  lead["allowed"]))
        return rows

    @classmethod
    def check_names(cls, names: Iterable[str]) -> None:
        """Each of `names` is a parameter, or an error names the closest (kvutils.core.params)."""
        params.check_names(names, cls.NOTEBOOK, cls.names())

    @classmethod
    def from_notebook(cls, namespace: dict):
        """The notebook's first cell: no unknown `-p` name and a usable results_dir (see
        `params.check_notebook`, which also decides the folder), then every value checked.

        A refusal is said first, in one line: run by papermill's command line, the kernel's own
        stderr is the terminal's, so the reason comes before papermill's traceback of the cell; the
        cell's traceback itself ends here, without kvutils' frames inside the check."""
        try:
            results_dir = params.check_notebook(namespace, cls.NOTEBOOK, cls.defaults())
            values = {name: namespace.get(name, default) for name, default in cls.defaults().items()}
            return cls(**{**values, "results_dir": results_dir})
        except ValueError as err:
            say_first(cls.NOTEBOOK, err)
            raise err.with_traceback(None) from None
