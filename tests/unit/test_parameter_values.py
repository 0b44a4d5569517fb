"""Every parameter takes the values papermill and the runner pass (issue 38): papermill's command
line makes `-p lr 0.001` a float and `-p k_values 2` an int, its Python API passes lists, and the
runner (`python -m kvutils.chapters -p …`, `make chapter PARAMS=…`) reads values as papermill's
command line does. Each such value of a valid setting is recorded in one canonical form, which the
chapter's results schema accepts; no model is needed to check it."""
import pytest
from jsonschema import Draft202012Validator
from papermill.cli import _resolve_type as papermills_own

from kvutils.book import chapters
from kvutils.core import schema
from kvutils.core.declared import canonical
from kvutils.core.params import papermill_value
from kvutils.studies.parameters import DECLARED

WITH_SCHEMA = {name: cls for name, cls in DECLARED.items() if schema.has_schema(name)}


def _forms(default) -> dict[str, object]:
    """The values papermill can hand a notebook for a parameter whose default is `default`: its text
    on the command line, the first item of a comma list alone, the list as a Python list, and a
    whole float as an int."""
    text = default if isinstance(default, str) else str(default)
    forms = {"command line": papermill_value(text)}
    if isinstance(default, str) and "," in default:
        items = [item.strip() for item in default.split(",")]
        forms["one item"] = papermill_value(items[0])
        forms["a list"] = [papermill_value(item) for item in items]
    if isinstance(default, float) and default.is_integer():
        forms["an int"] = int(default)
    return forms


CASES = [(name, field, form, value) for name, cls in WITH_SCHEMA.items() for field, default in cls.defaults().items()
         if field != "results_dir" for form, value in _forms(default).items()]


def _parameters_schema(name: str) -> Draft202012Validator:
    import json

    return Draft202012Validator(json.loads(schema.schema_path(name).read_text())["properties"]["parameters"])


@pytest.mark.parametrize("name, field, form, value", CASES, ids=[f"{n}-{f}-{k}" for n, f, k, _ in CASES])
def test_every_value_papermill_passes_is_recorded_as_its_schema_accepts(name, field, form, value, tmp_path):
    # chapter 5's patch_k must be one of its k_values (checked together, before any model)
    with_it = {"patch_k": 4} if (name, field, form) == ("05_qwen3_switch", "k_values", "one item") else {}
    given = DECLARED[name](**{field: value, "results_dir": str(tmp_path), **with_it})
    recorded = given.as_dict()
    assert [e.message for e in _parameters_schema(name).iter_errors(recorded)] == []
    assert DECLARED[name](**recorded).as_dict() == recorded  # the canonical form is a fixed point


@pytest.mark.parametrize("annotation, default, value, recorded", [
    ("str | float", "0.003,gemma3-270m:0.001", 0.001, "0.001"),  # -p lr 0.001
    ("str | float", "0.003", 1e-5, "1e-05"),
    ("str | int", "2,4,8", 2, "2"),  # -p k_values 2
    ("str | int", "2,4,8", [2, 4, "L"], "2,4,L"),  # papermill's Python API
    ("str | int", "1024", 2048, "2048"),  # -p retrieval_contexts 2048
    ("str | int", 96, "160", 160),  # steps as text
    ("str | int", 96, "96,qwen2.5-0.5b:160", "96,qwen2.5-0.5b:160"),
    ("str | int", 8, "L", "L"),  # patch_k
    ("float", 16, 32, 32.0),  # -p alpha 32
    ("float", 99.0, True, True),  # not a number: left for the check to refuse
    ("int", 16, 4.5, 4.5),
    ("str", "0.1,0.5,0.9", [0.1, 0.5], "0.1,0.5"),
])
def test_canonical_forms(annotation, default, value, recorded):
    out = canonical(annotation, default, value)
    assert out == recorded and type(out) is type(recorded)


@pytest.mark.parametrize("raw", ["2,4,8", "0.1,0.5", "0.001", "1e-3", "7", "-3", "True", "False", "None", "L",
                                 "(2,4)", "[1, 2]", "nan", " 5 "])
def test_the_runner_reads_a_value_as_papermills_command_line_does(raw):
    assert papermill_value(raw) == papermills_own(raw) or (raw == "nan" and papermill_value(raw) != papermill_value(raw))


@pytest.mark.parametrize("argv, given", [
    # (patch_k is one of k_values: the default 12 is not among these)
    # once refused: "k='(2' is not allowed"
    (["05", "-p", "k_values", "2,4,8", "-p", "patch_k", "8"], {"k_values": "2,4,8", "patch_k": 8}),
    (["04", "-p", "retrieval_depths", "0.1,0.5"], {"retrieval_depths": "0.1,0.5"}),  # once "'(0.1' is not a number"
    (["05", "-p", "lr", "0.001", "-p", "k_values", "2", "-p", "patch_k", "2"], {"lr": 0.001, "k_values": 2,
                                                                                "patch_k": 2}),
])
def test_the_runner_passes_valid_lists_and_numbers_to_the_chapter(argv, given, tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(chapters, "run_chapter", lambda chapter, profile, results_dir, output_dir, overrides:
                        ran.append((chapter, overrides)))
    chapters.main([*argv, "--no-pages", "--results-dir", str(tmp_path / "r"), "--output-dir", str(tmp_path / "o")])
    assert ran == [(argv[0], given)]


def test_a_value_of_no_valid_setting_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"k_values: '2,,4' has an empty item"):
        from kvutils.studies.qwen3_switch.study import parse_k_values
        parse_k_values(DECLARED["05_qwen3_switch"](k_values="2,,4", results_dir=str(tmp_path)).k_values, 24, "x")
    with pytest.raises(ValueError, match=r"retrieval_depths: 1\.5 is not|retrieval_depths: '1\.5' is outside"):
        DECLARED["04_cache_approximations"](retrieval_depths=1.5, results_dir=str(tmp_path))
