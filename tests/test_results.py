"""Results are written atomically: an interrupted write leaves the previous file intact."""
import json
import math

import pytest

from kvutils import results


def test_save_results_records_provenance(tmp_path):
    path = results.save_results(tmp_path, "ch", {"n": 1}, [{"name": "m"}], {"x": float("nan"), "y": 2.5}, 0.0)
    record = json.loads(path.read_text())
    assert record["numbers"] == {"x": None, "y": 2.5} and record["parameters"] == {"n": 1}
    assert record["packages"]["torch"].startswith("2.13.0")
    assert {"git_commit", "machine", "wall_time_s", "finished"} <= set(record)


def test_failed_write_keeps_previous_results(tmp_path):
    path = results.save_results(tmp_path, "ch", {}, [], {"value": 1}, 0.0)
    before = path.read_text()
    with pytest.raises(TypeError):
        results.save_results(tmp_path, "ch", {}, [], {"value": object()}, 0.0)
    assert path.read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == ["ch.json"]  # no temporary file left behind


def test_jsonable_converts_tensors_and_non_finite():
    import torch

    out = results._jsonable({"t": torch.tensor([1.0, math.inf]), 3: (1, 2)})
    assert out == {"t": [1.0, None], "3": [1, 2]}
