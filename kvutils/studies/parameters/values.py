"""The checks of one parameter's value that the declarations share: each is `check(name, value)`,
raising ValueError naming the parameter and what is allowed, and none loads a model (a field's
`check`, kvutils.core.declared)."""
from __future__ import annotations

import math

from kvutils.core import checks
from kvutils.core.haystack import check_depths
from kvutils.models.checks import parse_model_list
from kvutils.studies.sense_probes.templates import check_repeat_template

# upper bounds, each naming why a larger value cannot be meant (a value past them fails at once, not
# after minutes of model loading with an overflow or an allocation that names no parameter)
MAX_LAYERS = 10_000
LAYERS_WHY = "more layers than any model has: the deepest published have a few hundred"
MAX_RANK = 65_536
RANK_WHY = ("wider than any model's layers: a rank at a layer's width is already a full update (and chapter "
            "5 also checks that the adapters fit in memory, from each model's config)")
MAX_ALPHA = 1e6
ALPHA_WHY = ("the adapter's update is scaled by alpha / rank: a million times it would swamp the weights "
             "it adapts")


def at_least(low: int, high: int = checks.MAX_ITEMS, why: str = checks.ITEMS_WHY):
    """A count of things computed in turn (documents, prompts, repeats): `low` … a million."""
    return lambda name, value: checks.check_int(name, value, low, high, why)


def tokens(low: int = 1):
    """A number of tokens: `low` … more than any model's context (checks.MAX_TOKENS)."""
    return lambda name, value: checks.check_count(name, value, low)


def layers(name: str, value) -> None:
    checks.check_int(name, value, 1, MAX_LAYERS, LAYERS_WHY)


def lora_rank(name: str, value) -> None:
    checks.check_int(name, value, 1, MAX_RANK, RANK_WHY)


def seed_bits(name: str, value) -> None:
    checks.check_seed(name, value)


def one_of(allowed):
    return lambda name, value: checks.check_choice(name, value, allowed)


def some_of(allowed):
    return lambda name, value: checks.check_list(name, value, allowed)


def integers(name: str, value) -> None:
    checks.check_int_list(name, value, 1, checks.MAX_TOKENS)


def usable_device(name: str, value) -> None:
    checks.check_device(value)


def one_device(name: str, value) -> None:
    checks.check_device(value)
    if value == "auto":  # training and the tail patch move every tensor to one device
        raise ValueError("device: 'auto' (a model spread over several devices) is not supported by chapter "
                         "5, which trains and patches on one device; use 'cpu', 'cuda' or 'cuda:N'")


def depths(name: str, value) -> None:
    check_depths(value, name)


def true_or_false(name: str, value) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def positive_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")


def lora_alpha(name: str, value) -> None:
    positive_number(name, value)
    if value > MAX_ALPHA:
        raise ValueError(f"{name} must be at most {MAX_ALPHA:,.0f} ({ALPHA_WHY}), got {value:g}")


def grad_norm(name: str, value) -> None:
    checks.check_number(name, value, 0, 1e6)


def percentage(name: str, value) -> None:
    checks.check_number(name, value, 0, 100, low_inclusive=False)


def template_with_word(name: str, value) -> None:
    check_repeat_template(value, name)


def visible_marker(name: str, value) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string ('' = the task's own marker), got {value!r}")
    if value and not value.strip():
        raise ValueError(f"{name}: {value!r} is only white space; give visible text, or '' for the task's "
                         "own marker")


def even_count(name: str, value) -> None:
    """A number of examples shown half with their true continuation, half with another's."""
    checks.check_int(name, value, 2, checks.MAX_ITEMS, checks.ITEMS_WHY)
    if value % 2:
        raise ValueError(f"{name} must be even (each passage A is shown with its true continuation and "
                         f"with another document's passage), got {value}")


def model_list(name: str, value) -> None:
    """One or more models, each named once (a model named twice would be computed twice)."""
    parse_model_list(value, name)


def model_subset(name: str, value) -> None:
    """A subset of `models`; "" for none."""
    if isinstance(value, str) and not value.strip():
        return
    parse_model_list(value, name)


# --------------------------------------------------------------------------- chapter 5's training counts

# AdamW steps per adapter. The full build's cheapest adapter (qwen2.5-0.5b's activated k=4 tail) took
# 29.5 s for 96 steps: 0.31 s a step on this machine (tests/data/full_build/05_qwen3_switch.json.gz).
MAX_STEPS = 100_000
STEPS_WHY = ("each step is a forward and backward pass, in turn: at the full build's fastest, 0.31 s a step, "
             "100,000 steps of one adapter take over 8 hours, 8 times make book's 60-minute budget")
MAX_K = MAX_LAYERS

# parameter: (what one value is, its type, the smallest allowed (excluded for a float), an example)
PER_MODEL = {
    "lr": ("a learning rate", float, 0.0, "0.002, or '0.003,gemma3-270m:0.001'"),
    "steps": ("a whole number of steps", int, 1, "64, or '96,gemma3-270m:64'"),
}


def _number(kind, text: str):
    """`text` as a `kind`; a whole float ("1e9", 96.0) as an int; None where it is neither."""
    try:
        return kind(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    if kind is int and math.isfinite(number) and number.is_integer():
        return int(number)
    return None


def split_per_model(parameter: str, value) -> tuple[float | int | None, dict[str, float | int]]:
    """`lr` or `steps` read without any model: (the default or None, {model: value}). One value for
    every model, or a default and `model:value` pairs ("0.003,gemma3-270m:0.001"; a colon, as papermill
    reads no second "=" on a parameter's line). Each value is checked; a number of steps is at most
    MAX_STEPS (STEPS_WHY). Which models the pairs name is checked with the models
    (kvutils.studies.qwen3_switch.study.parse_per_model)."""
    what, kind, smallest, example = PER_MODEL[parameter]
    example = f"e.g. {example} (a default, then model:value pairs)"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        items = [repr(value) if isinstance(value, float) else str(value)]
    elif isinstance(value, str) and value.strip():
        items = [item.strip() for item in value.split(",")]
    else:
        raise ValueError(f"{parameter} must be {what} or a string of them, {example}; got {value!r}")
    default, values = None, {}
    for item in items:
        name, _, text = item.rpartition(":")
        number = _number(kind, text.strip())
        too_small = number is not None and not (number > smallest if kind is float else number >= smallest)
        if number is None or not math.isfinite(number) or too_small or (not name and ":" in item):
            bound = f"> {smallest:g}" if kind is float else f">= {smallest}"
            raise ValueError(f"{parameter}: {item!r} is not {what} {bound} (or model:value); {example}")
        if parameter == "steps" and number > MAX_STEPS:
            raise ValueError(f"steps must be at most {MAX_STEPS:,} ({STEPS_WHY}), got {number:,}")
        if name:
            if name.strip() in values:
                raise ValueError(f"{parameter}: {name.strip()} is given twice; give each model once")
            values[name.strip()] = number
        elif default is None:
            default = number
        else:
            raise ValueError(f"{parameter}: two defaults ({default} and {number}); give one, then "
                             "model:value pairs")
    return default, values


def per_model(name: str, value) -> None:
    split_per_model(name, value)


def k_items(name: str, value) -> list[int | str]:
    """Depths of LoRA tails without a model: integers 1 … MAX_K or "L" (every layer), each once."""
    items = checks.split_items(name, value, example="1,2,4,L")  # papermill passes `-p k_values 4` as 4
    out = []
    for item in items:
        if item == "L":
            out.append(item)
            continue
        k = int(item) if item.lstrip("+-").isdigit() else None
        if k is None or not 1 <= k <= MAX_K:
            raise ValueError(f"{name}: k={item!r} is not allowed; k must be an integer from 1 to the model's "
                             f"layers (at most {MAX_K:,}: {LAYERS_WHY}), or L (every layer)")
        out.append(k)
    checks.no_repeats(name, out)
    return out


def tail_depths(name: str, value) -> None:
    k_items(name, value)


def tail_depth(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{name} must be an integer from 1 to the model's layers, or L; got {value!r}")
    k_items(name, str(value))
