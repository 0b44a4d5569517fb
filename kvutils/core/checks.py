"""Checks of a parameter's value, shared by every notebook's first cell and every command line.

Each check raises ValueError naming the parameter and what is allowed, and none loads a model,
so a wrong parameter fails in seconds.
"""
from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Iterable

# upper bounds of counts, each with the reason a larger value cannot be meant
MAX_TOKENS = 1 << 24  # 16,777,216
TOKENS_WHY = "more positions than any model has: the longest published context is 10 M tokens"
MAX_ITEMS = 1_000_000  # documents, prompts, examples, steps, repeats
ITEMS_WHY = "each is computed in turn: a million would take weeks on any machine"
MAX_SEED = (1 << 64) - 1
SEED_WHY = "a seed is 64 bits"


def check_int(name: str, value, low: int, high: int | None = None, why: str = "") -> int:
    """An integer in [low, high]; `why` says why the upper bound is there."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        if high is None or (why and value < low):  # a bound far away, said only when it is passed
            allowed = f">= {low}"
        else:
            allowed = f"between {low} and {high:,}" + (f" ({why})" if why else "")
        shown = f"{value:,}" if abs(value) < 10 ** 30 else f"a number of {len(str(abs(value)))} digits"
        raise ValueError(f"{name} must be {allowed}, got {shown}")
    return value


def check_count(name: str, value, low: int = 1) -> int:
    """A number of tokens or positions: at most MAX_TOKENS (TOKENS_WHY)."""
    return check_int(name, value, low, MAX_TOKENS, TOKENS_WHY)


def check_seed(name: str, value) -> int:
    return check_int(name, value, 0, MAX_SEED, SEED_WHY)


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
    no_repeats(name, items)
    return items


def no_repeats(name: str, items: list) -> None:
    """A value given twice would be computed twice and overwrite itself in the results."""
    twice = sorted({str(v) for v in items if items.count(v) > 1})
    if twice:
        raise ValueError(f"{name}: {', '.join(twice)} given more than once; give each value once")


COMPUTE_DEVICES = ("cpu", "cuda", "mps", "xpu")  # 'meta' holds no numbers; the others need plug-ins
# a torch device's form ("cuda:1"), checked before torch loads
DEVICE_PATTERN = re.compile(r"[a-z_]+(:\d{1,4})?")


def check_device(device: str) -> str:
    """A torch device, or "auto": accelerate's device_map="auto" spreads the model over every
    accelerator, then the CPU (kvutils.models.loading.load)."""
    if device in ("auto", "cpu"):  # no torch needed: a command line checks it before importing torch
        return device
    if not isinstance(device, str) or not DEVICE_PATTERN.fullmatch(device):
        raise ValueError(f"device: {device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:1', 'mps' or "
                         "'auto' (spread over every accelerator, then the CPU)")
    import torch  # whether the device is present

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device: {device!r} is not a torch device; use 'cpu', 'cuda', 'cuda:1', 'mps' or "
                         "'auto' (spread over every accelerator, then the CPU)") from None
    if dev.type not in COMPUTE_DEVICES:
        raise ValueError(f"device: {device!r} is not a device kvutils computes on; use one of "
                         f"{', '.join(COMPUTE_DEVICES)} (with an index where there are several, e.g. "
                         "'cuda:1') or 'auto'")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} asked for, but no CUDA device is available here; use 'cpu'")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ValueError(f"device: {device!r} asked for, but this machine has {torch.cuda.device_count()} "
                         "CUDA device(s), numbered from 0")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device: {device!r} asked for, but MPS is not available here; use 'cpu'")
    if dev.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise ValueError(f"device: {device!r} asked for, but no XPU is available here; use 'cpu'")
    return device


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
    items = [v.strip() for v in value.split(",")]
    if not any(items):
        raise ValueError(f"{name} is empty; give values separated by commas, e.g. \"{example}\"")
    if not all(items):  # "0.1,,0.5" or a trailing comma: a value was lost, not meant
        raise ValueError(f"{name}: {value!r} has an empty item (two commas, or one at an end); give values "
                         f"separated by single commas, e.g. \"{example}\"")
    return items


def check_int_list(name: str, value, low: int, high: int | None = None,
                   example: str = "128,2000") -> list[int]:
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
    no_repeats(name, numbers)
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
