"""A cache method in one file: what the book says and draws of a method (its name for a reader, what
it always keeps, its family and colour, where it stands on the frontier and in the retrieval test)
are attributes of its class, and every list derives from the registry.

- The derived lists equal the literal ones of b2482e2 (before the registry drove them), in order,
  so the book's results and pages do not change.
- A method registered in a test, and nowhere else, appears in the acceptance CLI's list, the
  frontier's specs, the retrieval test's methods and the names table; it is gone again after.
- A class that leaves an attribute out, or inherits a parent method's name or colour, is refused
  by name when it is registered: no method is described with another's sentence.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import ClassVar

import pytest

from kvutils.cache import accept as acceptance
from kvutils.cache import registry
from kvutils.cache.base import POLICY, PRESS
from kvutils.cache.methods.press import AT_LEVELS, Press, at_ratios
from kvutils.cache.methods.snapkv import SnapKVPress
from kvutils.core import haystack
from kvutils.report import frontier as frontier_report
from kvutils.report import names
from kvutils.studies.cache_approximations import frontier
from kvutils.studies.cache_approximations import retrieval as retrieval_study

# ------------------------------ the lists as b2482e2 wrote them (the frontier without 0.75 since stop 56)

OPS_THEN = ["exact", "cast", "quantize_naive", "quantize_kivi", "window", "chunk_reuse", "chunk_blend",
            "random", "knorm", "snapkv", "pyramidkv", "expected_attention", "adakv", "h2o", "tova",
            "hf_quantized"]
PRESSES_THEN = ("random", "knorm", "snapkv", "expected_attention", "pyramidkv", "adakv")
FRONTIER_THEN = ("exact", "cast:dtype=bfloat16", "quantize_kivi:bits=4", "quantize_kivi:bits=2",
                 "window:size=128,sinks=4", "hf_quantized:backend=fp8",
                 *(f"{name}:compression_ratio={r}" for name in PRESSES_THEN for r in (0.25, 0.5)),
                 "h2o:compression_ratio=0.5", "tova:compression_ratio=0.25", "tova:compression_ratio=0.5")
PRECISION_THEN = ("cast:dtype=bfloat16", "quantize_naive:bits=4", "quantize_kivi:bits=4",
                  "quantize_kivi:bits=2")
POLICIES_THEN = ("tova",)
DISPLAY_THEN = {"snapkv": "SnapKV", "pyramidkv": "PyramidKV", "adakv": "AdaKV", "knorm": "K-norm",
                "random": "random", "expected_attention": "Expected Attention", "h2o": "H2O", "tova": "TOVA",
                "exact": "exact cache", "quantize_naive": "naive", "quantize_kivi": "KIVI", "cast": "cast",
                "hf_quantized": "transformers", "chunk_reuse": "chunk reuse", "chunk_blend": "CacheBlend",
                "window": "window"}
COLOURS_THEN = {"exact": "black", "cast": "#8c564b", "quantize_kivi": "#17becf", "hf_quantized": "navy",
                "streaming window": "#bcbd22", "random": "#7f7f7f", "knorm": "#ff7f0e", "snapkv": "#2ca02c",
                "expected_attention": "#d62728", "pyramidkv": "#9467bd", "adakv": "#e377c2", "h2o": "#1f77b4",
                "tova": "gold"}
SNAP_KEEPS = "its observation window, the last 64 prefill tokens; no sinks (kvpress's SnapKV protects none)"
FEWER_BITS = "every entry, stored in fewer bits"
NOTHING = "nothing in particular (no sinks, no recent window)"
# the default frontier's "always keeps" table (1,024 + 128 tokens), row by row
KEEPS_THEN = {
    "exact": "every entry", "cast": FEWER_BITS, "quantize_kivi": FEWER_BITS, "streaming window":
    "the first 4 tokens (sinks) and the most recent ones, up to its size (StreamingLLM keeps 4 sinks)",
    "hf_quantized": FEWER_BITS, "random": NOTHING, "knorm": NOTHING, "snapkv": SNAP_KEEPS,
    "expected_attention": "the first 4 tokens (sinks; kvpress's n_sink = 4)", "pyramidkv": SNAP_KEEPS,
    "adakv": SNAP_KEEPS,
    "h2o": "the most recent 50% of its budget; the rest by accumulated attention (no sinks: the first tokens "
    "stay only as heavy hitters)",
    "tova": "the last prefill token at the cut; then nothing (the entry with the least attention goes)"}


def _then(items, key=lambda item: item):
    """The items that belong to a method of b2482e2 (a method added since may stand among them)."""
    return [item for item in items if key(item) in OPS_THEN]


def _name_of(spec: str) -> str:
    return spec.partition(":")[0]


def _frontier_run(specs) -> dict:
    return {"model": {"ops": {spec: {} for spec in specs}}}


def test_the_derived_lists_are_the_ones_the_book_was_built_with():
    """Same order, same strings, same colours: the book's results do not change."""
    assert _then(registry.OPS) == OPS_THEN
    assert _then(registry.frontier_ops(), _name_of) == list(FRONTIER_THEN)
    assert _then(retrieval_study.precision(), _name_of) == list(PRECISION_THEN)
    assert _then(retrieval_study.presses()) == list(PRESSES_THEN)
    assert _then(retrieval_study.policies()) == list(POLICIES_THEN)
    assert {k: v for k, v in names.display_names().items() if k in OPS_THEN} == DISPLAY_THEN
    colours = frontier_report.colours()
    assert {k: v for k, v in colours.items() if k in COLOURS_THEN or k in OPS_THEN} == COLOURS_THEN
    keeps = frontier_report.keeps_table(_frontier_run(frontier.default_specs(1024, 128)))["always keeps"]
    shown = {names.method_name(m): text for m, text in KEEPS_THEN.items()}  # by the legend's names
    assert list(keeps.index) == list(shown) and keeps.to_dict() == shown


def test_the_charts_give_a_method_without_a_colour_a_spare_one():
    spare = frontier_report.SPARE_COLOURS
    assert registry.OPS["quantize_naive"].colour is None
    assert frontier_report.chart_colours(["snapkv", "quantize_naive", "chunk_blend", "snapkv"]) == {
        "snapkv": "#2ca02c", "quantize_naive": spare[0], "chunk_blend": spare[1]}
    assert not set(spare) & set(frontier_report.colours().values())  # a spare colour never repeats a method's


# ----------------------------------------------------------------- a method added in one file


@dataclass(frozen=True)
class KeepLastPress(Press):
    """A test's throwaway press: each KV head keeps the most recent prefill entries."""

    name: ClassVar[str] = "keep_last"
    examples: ClassVar[tuple[str, ...]] = ("keep_last:compression_ratio=0.5",)
    display: ClassVar[str] = "Keep-last"
    colour: ClassVar[str | None] = "#123456"
    place: ClassVar[int] = 145  # between PyramidKV (140) and AdaKV (150)
    frontier: ClassVar[tuple[str, ...]] = at_ratios(0.5)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS

    def score(self, view):
        import torch

        keys = view.keys[0]  # (kv_heads, P, head_dim)
        return torch.arange(keys.shape[-2], dtype=torch.float32).expand(keys.shape[0], -1)

    def always_keeps(self):
        return "the most recent prefill tokens, and nothing else"


PROMPT = haystack.Prompt(ids=tuple(range(1024)), question=1000, answer=1020, needle=(100, 120), depth=0.1,
                         context=1024, key="1234567", word="bank", haystack="pydoc")


def test_a_method_registered_in_one_file_appears_in_every_list(capsys):
    spec = "keep_last:compression_ratio=0.5"
    assert "keep_last" not in registry.OPS
    with registry.registered(KeepLastPress):
        with pytest.raises(SystemExit):  # the acceptance CLI's list of operations
            acceptance.main(["--help"])
        lines = capsys.readouterr().out.splitlines()
        line = next(line for line in lines if line.strip().startswith("keep_last"))
        assert "compression_ratio=0.5" in line and "most recent prefill entries" in line
        specs = frontier.default_specs(1024, 128)  # the frontier's specs, at its place
        assert specs[specs.index("pyramidkv:compression_ratio=0.5") + 1] == spec
        assert specs[specs.index(spec) + 1] == "adakv:compression_ratio=0.25"
        by_label = retrieval_study.method_specs(PROMPT)  # the retrieval test's methods, at each level
        for level in retrieval_study.LEVELS:
            assert by_label[f"keep_last@{level:g}"] == KeepLastPress(level).spec
        assert retrieval_study.frontier_label(spec, 0.5) == "keep_last@0.5"
        assert names.display_names()["keep_last"] == "Keep-last"  # the names table, and what the pages say
        assert names.human(spec) == "Keep-last (evicts 50 %)"
        assert names.human_label("keep_last@0.25") == "Keep-last (evicts 25 %)"
        assert frontier_report.colours()["keep_last"] == "#123456"
        keeps = frontier_report.keeps_table(_frontier_run(specs))["always keeps"]
        assert keeps["Keep-last"] == "the most recent prefill tokens, and nothing else"
        assert registry.OPS["keep_last"].family == "press" and registry.parse_op(spec) == KeepLastPress(0.5)
    assert "keep_last" not in registry.OPS and "keep_last" not in names.display_names()
    assert list(registry.frontier_ops()) == list(FRONTIER_THEN)


def test_the_throwaway_press_keeps_what_it_says():
    """Its `score` is a real press's: the kept entries are the last ones of each head."""
    import torch

    from kvutils.cache.prefilled import exact_prefill
    from tests.conftest import load_cached

    loaded = load_cached("tiny-llama", "float32")
    views = exact_prefill(loaded, torch.arange(10, 50)[None], views=True).views
    for mask in KeepLastPress(0.75).decide(views):
        assert mask[:, -10:].all() and not mask[:, :-10].any()


# ----------------------------------------------------------------- what it must state, or be refused


TWIN = dict(name="twin", examples=("twin:compression_ratio=0.5",), display="Twin", colour="#654321",
            place=146, frontier=(), retrieval=(), always_keeps=lambda self: "the most recent prefill tokens")


def _twin(leave_out: str = "", **change) -> type:
    """A press like KeepLastPress (its own name, display, colour and place), leaving `leave_out` out
    and with `change` made."""
    own = {k: v for k, v in {**TWIN, **change}.items() if k != leave_out}
    annotations = {k: ClassVar for k in own if k != "always_keeps"}
    body = {"__annotations__": annotations, **own, "score": KeepLastPress.score}
    return dataclass(frozen=True)(type("Twin", (Press,), body))


@pytest.mark.parametrize("attr", [*registry.OWN, "always_keeps"])
def test_a_method_that_leaves_an_attribute_out_is_refused_by_name(attr):
    before = dict(registry.OPS)
    with pytest.raises(TypeError, match=rf"Twin: a cache method states {attr}"):
        registry.register(_twin(leave_out=attr))
    assert registry.OPS == before


def test_a_method_that_inherits_a_parents_name_for_a_reader_is_refused():
    """A SnapKV variant that forgets its own `display` would be called SnapKV on every page."""

    @dataclass(frozen=True)
    class Variant(SnapKVPress):
        name: ClassVar[str] = "variant"
        examples: ClassVar[tuple[str, ...]] = ("variant:compression_ratio=0.5",)
        colour: ClassVar[str | None] = None
        place: ClassVar[int] = 147
        frontier: ClassVar[tuple[str, ...]] = ()
        retrieval: ClassVar[tuple[str, ...]] = ()

    with pytest.raises(TypeError, match="Variant: a cache method states display"):
        registry.register(Variant)
    Variant.display = "SnapKV"  # stated, but another's
    with pytest.raises(TypeError, match="Variant: display='SnapKV' is already SnapKVPress's"):
        registry.register(Variant)
    assert "variant" not in registry.OPS


@pytest.mark.parametrize("change, message", [
    (dict(name="snapkv"), "Twin: name='snapkv' is already SnapKVPress's"),
    (dict(colour="#2ca02c"), "Twin: colour='#2ca02c' is already SnapKVPress's"),
    (dict(place=120), "Twin: place=120 is already SnapKVPress's"),
    (dict(retrieval=("window=8",)), "Twin: retrieval=.*a press is swept over the retrieval test's budget"),
])
def test_a_method_that_shares_a_name_colour_or_place_is_refused(change, message):
    before = dict(registry.OPS)
    with pytest.raises(TypeError, match=message):
        registry.register(_twin(**change))
    assert registry.OPS == before


def test_a_setting_that_does_not_parse_is_refused_when_registered():
    with pytest.raises(ValueError, match="twin: 'ratio=0.5' is not key=value with a known key"):
        registry.register(_twin(frontier=("ratio=0.5",)))
    assert "twin" not in registry.OPS
    with registry.registered(_twin()) as twin:  # the same twin, stated right, is taken (and given back)
        assert registry.OPS["twin"] is twin
    assert "twin" not in registry.OPS


@pytest.mark.parametrize("name", list(registry.OPS))
def test_every_method_states_its_own_page_attributes(name):
    """Each registered method's own class states them; every setting it lists parses back."""
    cls = registry.OPS[name]
    assert all(attr in vars(cls) for attr in registry.OWN), name
    assert cls.display and isinstance(cls.place, int) and cls.family
    hints = typing.get_type_hints(cls)  # parse_op converts each setting by its field's type
    assert registry.field_types(cls) == {f.name: hints[f.name] for f in dataclasses.fields(cls)}
    for spec in registry.frontier_ops() + registry.retrieval_fixed():
        if _name_of(spec) == name:
            op = registry.parse_op(spec)
            assert op.name == name and isinstance(op.always_keeps(), str) and op.always_keeps()
    if cls.kind in (PRESS, POLICY):
        assert cls.retrieval in ((), ("",))
