"""Chapters 2 and 3's notebook runs: a causal encoder stops chapter 3 in its first cell; the quick
profile's results hold the causal identity and the encoder's contrast."""
import json

import pytest
from conftest import run_failing_chapter


def test_notebook_stops_in_its_first_cell_on_a_causal_encoder(tmp_path):
    error, cell = run_failing_chapter("03", tmp_path, {"encoder": "tiny-llama"})
    assert "encoder: tiny-llama is a causal" in error and "senses_study.plan(" in cell


def _record(root, name):
    return json.loads((root / "results" / f"{name}.json").read_text())


def test_chapter2_quick_results_hold_the_contrast(quick_chapters):
    root, _ = quick_chapters
    numbers = _record(root, "02_bert_contrast")["numbers"]
    assert list(numbers) == ["tiny-llama", "tiny-gemma3", "tiny-bert"]
    for model in ("tiny-llama", "tiny-gemma3"):
        assert max(numbers[model]["cosine_distance_max"]) == 0.0
        assert max(numbers[model]["key_relative_diff_max"]) == 0.0
    bert = numbers["tiny-bert"]
    assert bert["cosine_distance_mean"][0] == 0.0 and bert["cosine_distance_mean"][-1] > 0
    assert bert["key_relative_diff_mean"][-1] > 0
    assert (root / "results" / "figures" / "02_contexts_per_layer.png").stat().st_size > 10_000


def test_chapter3_quick_results_hold_the_identity(quick_chapters):
    root, _ = quick_chapters
    record = _record(root, "03_sense_probes")
    numbers = record["numbers"]
    assert record["parameters"]["distance"] == "cosine"
    for model in ("tiny-llama", "tiny-gemma3"):
        probe = numbers[model]["probe"]
        assert probe["old_position_pct"] == [50.0] * (numbers[model]["layers"] + 1)
        assert len(probe["new_position_pct"]) == numbers[model]["layers"] + 1
        split = numbers[model]["attention"]
        parts = ("continuation", "first_token", "old_word", "rest")
        for layer in range(numbers[model]["layers"]):
            assert abs(sum(split[p][layer] for p in parts) - 1) < 1e-5
        # every item's outcome and shares are kept, and they give the page's numbers back
        assert [100 * sum(d) / probe["n_items"] for d in probe["new_position_right"]] == pytest.approx(probe["new_position_pct"])
        assert all(len(d) == probe["n_items"] for d in probe["old_position_right"])
        assert len(split["per_item"]["continuation"]) == probe["n_items"]
    assert numbers["tiny-gemma3"]["first_token"] == "<bos>"
    assert "new_position_pct" not in numbers["tiny-bert"]["probe"]
    figures = ("03_probe_accuracy", "03_attention_split", "03_attention_explorer")
    assert record["figures"] == {}  # a study writes numbers; its page draws the figures
    for figure in figures:
        png = root / "results" / "figures" / f"{figure}.png"
        assert png.stat().st_size > 10_000
