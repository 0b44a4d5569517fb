"""Chapter 1 end to end: bad parameters fail in the first cell before any model loads; the quick
profile runs and its results hold the exactness identities (the book is checked in test_book)."""
import json

import pytest
from conftest import run_failing_chapter

from kvutils import chapters, exactness

GOOD = dict(models="tiny-llama", dtypes="float64", n_prompts=2, prompt_tokens=8, new_tokens=4,
            recompute="one_pass", batch_size=2, corpus="pydoc", senses_file="data/senses.json",
            garden_paths_file="data/garden_paths.json", results_dir="results", device="cpu")


@pytest.mark.parametrize("change, message", [
    (dict(models="gpt-17"), r"models: unknown model 'gpt-17'"),
    (dict(models="minilm-l6"), r"models: minilm-l6 is a bidirectional encoder"),
    (dict(dtypes="float16"), r"dtypes: 'float16' not allowed"),
    (dict(new_tokens=600), r"models: tiny-llama handles at most 512 tokens.*608"),
    (dict(n_prompts=10_000), r"n_prompts=10000, but the corpus supplies only"),
    (dict(prompt_tokens=8000, models="gemma3-270m", new_tokens=1), r"prompt_tokens=8000: documents too short: pydoc:"),
    (dict(recompute="sometimes"), r"recompute: 'sometimes' is not allowed"),
    (dict(senses_file="nowhere.json"), r"senses_file: file not found"),
    (dict(device="cuda:3"), r"device: 'cuda:3'"),
    (dict(batch_size=0), r"batch_size must be >= 1"),
])
def test_bad_parameters_fail_before_any_model_loads(change, message, no_model_loads):
    with pytest.raises(ValueError, match=message):
        exactness.plan(**{**GOOD, **change})


def test_plan_prepares_prompts_without_loading(no_model_loads):
    p = exactness.plan(**GOOD)
    assert p.prompts["tiny-llama"].shape == (2, 8) and len(p.pairs) == 18


def test_notebook_stops_in_its_first_cell_for_an_absent_hub_model(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    error, cell = run_failing_chapter("01", tmp_path, {"models": "EleutherAI/pythia-160m"})
    assert "ModelNotAvailable" in error and "hf download EleutherAI/pythia-160m" in error
    assert "ch1.plan(" in cell
    assert not (tmp_path / "results" / "01_cache_exactness.json").exists()


def test_quick_profile_results_hold_the_identities(quick_chapters):
    root, _ = quick_chapters
    record = json.loads((root / "results" / "01_cache_exactness.json").read_text())
    assert record["parameters"]["models"] == chapters.QUICK["01_cache_exactness"]["models"]
    assert [m["name"] for m in record["models"]] == ["tiny-llama", "tiny-gemma3"]
    for model, by_dtype in record["numbers"].items():
        fp64, fp32 = by_dtype["float64"], by_dtype["float32"]
        n = record["parameters"]["n_prompts"]
        assert fp64["decode"]["identical"] == n and fp64["decode"]["max_logit_diff"] <= 1e-9
        assert fp64["prefixes"]["max_diff_across_continuations"] <= 1e-12
        assert fp64["prefixes"]["n_prefixes"] == 18
        assert fp32["decode"]["argmax_agreement_pct"] == 100.0
        assert 0 < fp32["decode"]["max_logit_diff"] <= 1e-4  # fp32 rounding is visible, and small
    assert (root / "results" / "figures" / "01_prefix_keys_per_layer.png").stat().st_size > 10_000


