"""Parameter checks shared by every notebook's first cell.

Each check raises ValueError naming the parameter and what is allowed, and none loads a model,
so a wrong parameter fails in seconds.
"""
from __future__ import annotations

import ast
import difflib
import json
import math
import re
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import torch

from kvutils.core import results
from kvutils.core.paths import REPO_ROOT
from kvutils.models import registry as model_registry


def check_int(name: str, value, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        allowed = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name} must be {allowed}, got {value}")
    return value


def check_choice(name: str, value, allowed: Iterable[str]) -> str:
    allowed = list(allowed)
    if value not in allowed:
        raise ValueError(f"{name}: {value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")
    return value


def check_list(name: str, value, allowed: Iterable[str]) -> list[str]:
    """A comma-separated string of choices, e.g. dtypes="float32,float64"."""
    allowed = list(allowed)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be one comma-separated string, got {value!r}")
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise ValueError(f"{name}: {', '.join(map(repr, bad)) or 'nothing given'} not allowed; "
                         f"give one or more of {', '.join(allowed)} separated by commas")
    _no_repeats(name, items)
    return items


def _no_repeats(name: str, items: list) -> None:
    """A value given twice would be computed twice and overwrite itself in the results."""
    twice = sorted({str(v) for v in items if items.count(v) > 1})
    if twice:
        raise ValueError(f"{name}: {', '.join(twice)} given more than once; give each value once")


COMPUTE_DEVICES = ("cpu", "cuda", "mps", "xpu")  # 'meta' holds no numbers; the others need plug-ins


def check_device(device: str) -> str:
    """A torch device, or "auto": accelerate's device_map="auto" spreads the model over every
    accelerator, then the CPU (kvutils.models.registry.load)."""
    if device == "auto":
        return device
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:1', 'mps' or 'auto' "
                         "(spread over every accelerator, then the CPU)") from None
    if dev.type not in COMPUTE_DEVICES:
        raise ValueError(f"device: {device!r} is not a device kvutils computes on; use one of "
                         f"{', '.join(COMPUTE_DEVICES)} (with an index where there are several, e.g. 'cuda:1') or 'auto'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} asked for, but no CUDA device is available here; use 'cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device: {device!r} asked for, but this machine has {torch.cuda.device_count()} CUDA "
                         f"device(s), numbered from 0")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device: {device!r} asked for, but MPS is not available here; use 'cpu'")
    if dev.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise ValueError(f"device: {device!r} asked for, but no XPU is available here; use 'cpu'")
    return device


FAMILY_WORDS = {"causal": "a causal (left-to-right) decoder", "encoder": "a bidirectional encoder"}
FAMILY_EXAMPLES = {"causal": "gemma3-270m, smollm2-135m or EleutherAI/pythia-160m",
                   "encoder": "minilm-l6 or bert-base-uncased"}


def check_models(name: str, value: str, family: str | None = None, min_context: int = 0,
                 context_from: str = "prompt_tokens + new_tokens") -> list[model_registry.Resolved]:
    """Resolve every model of a comma-separated string without loading weights."""
    resolved = [model_registry.resolve(m, parameter=name) for m in model_registry.parse_model_list(value, name)]
    for r in resolved:
        if family and r.family != family:
            raise ValueError(f"{name}: {r.name} is {FAMILY_WORDS[r.family]}; each model of {name} "
                             f"must be {FAMILY_WORDS[family]}, e.g. {FAMILY_EXAMPLES[family]}")
        if r.context < min_context:
            raise ValueError(f"{name}: {r.name} handles at most {r.context} tokens, but the parameters "
                             f"need {min_context} ({context_from})")
    return resolved


def split_items(name: str, value, example: str = "128,2000") -> list[str]:
    """The items of a comma-separated parameter as strings. papermill turns `-p name 4` into the
    int 4 and `-p name 1.5` into a float, so a single number is one item, not an error."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be values separated by commas, e.g. \"{example}\"; got {value!r}")
    if isinstance(value, (int, float)):
        value = str(value)
    elif isinstance(value, (list, tuple)) and all(isinstance(v, (str, int)) and not isinstance(v, bool)
                                                  for v in value):
        value = ",".join(map(str, value))
    if not isinstance(value, str):
        raise ValueError(f"{name} must be values separated by commas, e.g. \"{example}\"; got {value!r}")
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise ValueError(f"{name} is empty; give values separated by commas, e.g. \"{example}\"")
    return items


def check_int_list(name: str, value, low: int, high: int | None = None, example: str = "128,2000") -> list[int]:
    """Integers separated by commas ("128,2000"), or one integer as papermill passes it (2000)."""
    items = split_items(name, value, example)
    bad = [v for v in items if not re.fullmatch(r"[+-]?\d+", v)]
    if bad:
        raise ValueError(f"{name} must be integers separated by commas, e.g. \"{example}\"; "
                         f"{', '.join(map(repr, bad))} is not an integer")
    numbers = [int(v) for v in items]
    out = [n for n in numbers if n < low or (high is not None and n > high)]
    if out:
        allowed = f">= {low}" if high is None else f"between {low} and {high}"
        raise ValueError(f"{name}: every value must be {allowed}; {', '.join(map(str, out))} is not")
    _no_repeats(name, numbers)
    return numbers


def check_number(name: str, value, low: float, high: float, low_inclusive: bool = True) -> float:
    """A real number in [low, high] (or (low, high] when not `low_inclusive`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if value > high or value < low or (value == low and not low_inclusive):
        interval = f"{'[' if low_inclusive else '('}{low:g}, {high:g}]"
        raise ValueError(f"{name} must be in {interval}, got {value:g}")
    return float(value)


def check_flags(parser, argv: list[str] | None) -> None:
    """A command-line tool's flags: argparse names a misspelt one only after a missing required one
    (`--ops exact` says "--op is required"), and suggests nothing. Name it first, with the closest
    flag. Unambiguous abbreviations (`--dec` for `--decode`) stay allowed, as argparse allows them."""
    known = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    for token in sys.argv[1:] if argv is None else argv:
        if token == "--":
            break
        flag = token.split("=", 1)[0]
        if not flag.startswith("--") or flag in known or sum(k.startswith(flag) for k in known) == 1:
            continue
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        parser.error(f"unrecognized argument {flag}" + (f" (did you mean {close[0]}?)" if close else "")
                     + f"; the flags are {', '.join(known)}")


# --------------------------------------------------------------------------- a notebook's first cell

PAPERMILL_CELL = "# Parameters\n"  # how papermill's injected cell (-p, -y, -f) begins
RUNS_DIR = "runs"  # where a run with other parameters goes when results_dir is left at its default
_NOT_LITERAL = object()


def notebook_parameters(notebook: str) -> dict:
    """{name: default} of the `parameters` cell of notebooks/<notebook>.ipynb."""
    path = REPO_ROOT / "notebooks" / f"{notebook}.ipynb"
    if not path.is_file():
        raise ValueError(f"notebook: no {path}")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    return {name: value for name, value in _assignments("".join(cell["source"]))}


def _assignments(source: str) -> list[tuple[str, object]]:
    """(name, literal value) of each top-level `name = value` of a cell."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    out = []
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError):
                value = _NOT_LITERAL
            out.append((node.targets[0].id, value))
    return out


def injected_names(namespace: dict) -> list[str]:
    """The names papermill set in this kernel: it runs them as a cell of their own, after the
    parameters cell, that IPython keeps in its input history (`In`)."""
    history = namespace.get("In") or namespace.get("_ih") or []
    names = []
    for source in history:
        if isinstance(source, str) and source.startswith(PAPERMILL_CELL):
            names += [name for name, _ in _assignments(source) if name not in names]
    return names


def reject_unknown(namespace: dict, notebook: str) -> None:
    """A name given with `-p` that the notebook does not define stops the run, naming it and the
    closest parameter (papermill itself only warns, and the run would go on with the defaults)."""
    check_names(injected_names(namespace), notebook)


def check_names(names: Iterable[str], notebook: str) -> None:
    """Every name is a parameter of `notebook`, or an error names each that is not and the
    closest parameter."""
    known = list(notebook_parameters(notebook))
    unknown = [n for n in names if n not in known]
    if not unknown:
        return
    lowered = {k.lower(): k for k in known}
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
        hints.append(f"{name}: not a parameter of {notebook}"
                     + (f" (did you mean {lowered[close[0]]}?)" if close else ""))
    raise ValueError("; ".join(hints) + f". Its parameters: {', '.join(known)}")


def run_folder(namespace: dict, notebook: str) -> str:
    """results_dir for this run. Left at its default while other parameters are not, a run outside
    `make chapter` would replace the book's results, which the next page build publishes; it goes
    to runs/<notebook>-<time>/ instead. An explicit results_dir (as `make chapter` passes) is kept."""
    defaults = notebook_parameters(notebook)
    given = namespace.get("results_dir", defaults.get("results_dir"))
    if given != defaults.get("results_dir"):
        return given
    changed = [n for n, default in defaults.items() if n != "results_dir" and default is not _NOT_LITERAL
               and n in namespace and namespace[n] != default]
    if not changed:
        return given
    from kvutils.book.chapters import NOTEBOOKS

    number = next((n for n, name in NOTEBOOKS.items() if name == notebook), "NN")
    folder = str(Path(RUNS_DIR) / f"{notebook}-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"results_dir: {', '.join(changed)} differ from the book's defaults, so this run writes to "
          f"{folder}/, not to the book's {given}/ (the next page build would publish it). To rerun "
          f"the chapter into the book: make chapter N={number} PARAMS=\"-p name value ...\"; to choose "
          "the folder: -p results_dir <folder>.")
    return folder


def check_notebook(namespace: dict, notebook: str) -> str:
    """The checks every notebook's first cell makes before any model loads: no unknown parameter,
    and results_dir usable (written by a chapter, read by a summary page). Returns the
    results_dir to use (see `run_folder`)."""
    from kvutils.book.chapters import NOTEBOOKS

    reject_unknown(namespace, notebook)
    results_dir = namespace.get("results_dir")
    if notebook not in NOTEBOOKS.values():  # a summary page reads the chapters' results
        if not isinstance(results_dir, (str, Path)) or not results.expand(results_dir, "results_dir").is_dir():
            raise ValueError(f"results_dir: {results_dir!r} is not a folder; give the folder that holds the "
                             "chapters' results files (make book writes them to results/)")
        results.recover(results.expand(results_dir, "results_dir"))
        return str(results.expand(results_dir, "results_dir"))
    results_dir = run_folder(namespace, notebook)
    folder = results.check_output(results_dir, notebook)  # "~/runs" as the folder it names
    results.claim(folder, notebook)  # one run of this chapter at a time into this folder
    return str(folder)
