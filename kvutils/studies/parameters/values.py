"""The checks of one parameter's value that the declarations share: each is `check(name, value)`,
raising ValueError naming the parameter and what is allowed, and none loads a model (a field's
`check`, kvutils.core.declared)."""
from __future__ import annotations

import math

from kvutils.core import checks
from kvutils.core.haystack import check_depths
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
