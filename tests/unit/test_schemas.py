"""The results files' formats (kvutils.core.schema): every file a build writes has one, a full
build's files (tests/data/full_build/, the build named in its README) and the quick book's follow
them, and a file that departs from its format is refused by the loader, naming the place."""
import copy
import gzip
import json
import re
from pathlib import Path

import pytest

from kvutils.core import records, results, schema
from kvutils.core.catalog import NOTEBOOKS

FULL_BUILD = Path(__file__).parents[1] / "data" / "full_build"
# every results file of make book (job: jobs/<job>.json)
WRITTEN = [*NOTEBOOKS.values(), "04_decode_timing", "04_retrieval", "job", "bench"]
SNAPSHOT = [name for name in WRITTEN if name != "job"]  # the job records are under jobs/ (one file per job)


def full_build(name: str) -> dict:
    return json.loads(gzip.decompress((FULL_BUILD / f"{name}.json.gz").read_bytes()))


def test_every_results_file_a_build_writes_has_a_valid_schema():
    from jsonschema import Draft202012Validator

    assert sorted(p.name for p in schema.SCHEMAS.glob("*.schema.json")) == sorted(f"{n}.schema.json" for n in WRITTEN)
    for name in WRITTEN:
        Draft202012Validator.check_schema(json.loads(schema.schema_path(name).read_text()))


@pytest.mark.parametrize("name", SNAPSHOT)
def test_a_full_builds_results_follow_their_format(name):
    assert schema.problems(full_build(name), name) == []


def test_the_full_builds_job_records_follow_their_format():
    records = sorted((FULL_BUILD / "jobs").glob("*.json.gz"))
    assert {"timing", "costs", "05", "bench", "page-04"} <= {p.name.split(".")[0] for p in records}
    for p in records:
        assert schema.problems(json.loads(gzip.decompress(p.read_bytes())), "job") == [], p.name


@pytest.mark.parametrize("name", SNAPSHOT)
def test_the_quick_books_results_follow_their_format(quick_chapters, name):
    root, _ = quick_chapters
    assert schema.problems(json.loads((root / "results" / f"{name}.json").read_text()), name) == []


def _write(folder: Path, name: str, record: dict) -> None:
    results.write_json_atomic(folder / f"{name}.json", record)


def test_a_renamed_key_is_refused_naming_the_file_and_where(tmp_path):
    record = full_build("04_cache_approximations")
    ops = record["numbers"]["frontier"]["smollm2-135m"]["ops"]["knorm:compression_ratio=0.5"]
    ops["mean_KL"] = ops.pop("mean_kl")
    _write(tmp_path, "04_cache_approximations", record)
    with pytest.raises(ValueError, match=re.escape(
            f"results_dir: {tmp_path / '04_cache_approximations.json'} does not follow its format, "
            "kvutils/core/schemas/04_cache_approximations.schema.json, at numbers/frontier/smollm2-135m/ops/"
            "knorm:compression_ratio=0.5: ")) as err:
        records.load_results(tmp_path, "04_cache_approximations")
    assert "'mean_kl' is a required property" in str(err.value) and "rerun chapter 04_cache_approximations" in str(err.value)


@pytest.mark.parametrize("change, words", [
    (lambda n: n["qwen2.5-0.5b"]["switch"]["heldout"]["tail4"]["stale"].update(accuracy_pct="64%"),
     "at numbers/qwen2.5-0.5b/switch/heldout/tail4/stale/accuracy_pct: '64%' is not of type"),
    (lambda n: n["qwen2.5-0.5b"]["cost"].update(extra_field=1),
     "at numbers/qwen2.5-0.5b/cost: Additional properties are not allowed ('extra_field' was unexpected)"),
    (lambda n: n["qwen2.5-0.5b"]["training"]["adapters"]["tail4"].pop("losses"),
     "at numbers/qwen2.5-0.5b/training/adapters/tail4: 'losses' is a required property"),
])
def test_a_wrong_type_an_unknown_key_or_a_missing_one_is_named(change, words):
    record = full_build("05_qwen3_switch")
    change(record["numbers"])
    found = schema.problems(record, "05_qwen3_switch")
    assert any(f.startswith(words) for f in found), found


def test_data_keyed_maps_take_any_key_and_numbers_may_be_null():
    """A run on other models or operations writes other keys; a NaN is written as null."""
    record = full_build("04_cache_approximations")
    frontier = record["numbers"]["frontier"]
    frontier["my-model"] = copy.deepcopy(frontier["smollm2-135m"])
    frontier["my-model"]["ops"]["my_press:compression_ratio=0.3"] = frontier["my-model"]["ops"].pop("exact")
    frontier["my-model"]["ops"]["my_press:compression_ratio=0.3"]["mean_kl"] = None
    assert schema.problems(record, "04_cache_approximations") == []


def test_the_job_records_are_read_through_their_format(quick_chapters, tmp_path):
    root, _ = quick_chapters
    record = json.loads((root / "results" / "jobs" / "04.json").read_text())
    assert schema.problems(record, "job") == []
    _write(tmp_path, "job", {**record, "inputs_hash": "not-a-hash"})
    with pytest.raises(ValueError, match=r"job\.json does not follow its format, .* at inputs_hash: 'not-a-hash' does "
                                         r"not match"):
        records.load_record(tmp_path / "job.json", "job", "--results-dir", "delete it or rerun make book")


def test_as_written_is_what_the_file_holds(tmp_path):
    numbers = {"a": float("nan"), "b": (1, 2), 3: {"c": float("inf")}}
    assert results.as_written(numbers) == {"a": None, "b": [1, 2], "3": {"c": None}}
    _write(tmp_path, "x", {"numbers": numbers})
    assert json.loads((tmp_path / "x.json").read_text())["numbers"] == results.as_written(numbers)
