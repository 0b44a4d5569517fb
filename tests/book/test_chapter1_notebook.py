"""Chapter 1's notebook run: a hub model without weights stops it in its first cell; the quick
profile runs and its results hold the exactness identities, and its tables and sentences follow them
(the book is checked in test_book)."""
import json

import pytest
from conftest import run_failing_chapter

from kvutils.book import chapters


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
    for by_dtype in record["numbers"].values():
        fp64, fp32 = by_dtype["float64"], by_dtype["float32"]
        n = record["parameters"]["n_prompts"]
        assert fp64["decode"]["identical"] == n and fp64["decode"]["max_logit_diff"] <= 1e-9
        assert fp64["prefixes"]["max_diff_across_continuations"] <= 1e-12
        assert fp64["prefixes"]["n_prefixes"] == 18
        assert fp32["decode"]["argmax_agreement_pct"] == 100.0
        assert 0 < fp32["decode"]["max_logit_diff"] <= 1e-4  # fp32 rounding is visible, and small
        for r in by_dtype.values():  # the article's procedure on the first prompts, beside one pass
            k = min(record["parameters"]["per_step_prompts"], n)
            assert r["decode"]["recompute"] == "one_pass" and r["decode_per_step"]["recompute"] == "per_step"
            assert r["decode_per_step"]["n_prompts"] == k > 0
            assert r["decode_per_step"]["first_divergence"] == r["decode"]["first_divergence"][:k]
        assert fp64["decode_per_step"]["max_logit_diff"] <= 1e-9
    assert (root / "results" / "figures" / "01_prefix_keys_per_layer.png").stat().st_size > 10_000


@pytest.fixture(scope="module")
def ch1_numbers(quick_chapters):
    root, _ = quick_chapters
    return json.loads((root / "results" / "01_cache_exactness.json").read_text())["numbers"]


def test_every_decoding_row_names_its_procedure(ch1_numbers):
    """The article's figures (all per step) sit only on per-step rows; ours on both, each labelled."""
    from kvutils.report import cache_exactness as report

    table = report.chapter1_table(ch1_numbers)
    decoding = [m for m in table.index if "identical sequences" in m or "logit diff" in m or "argmax" in m]
    assert decoding and all(m.endswith("[one pass]") or m.endswith("[per step (article's procedure)]") for m in decoding)
    article = table["article (Pythia)"]
    assert all(article[m] == "—" for m in table.index if m.endswith("[one pass]"))
    assert article["fp64: max |logit diff| [per step (article's procedure)]"] == "2.54659e-11"
    assert (table.loc["prompts decoded [per step (article's procedure)]", "this run: tiny-llama"]
            == str(ch1_numbers["tiny-llama"]["float64"]["decode_per_step"]["n_prompts"]))


def test_chapter1_evidence_follows_the_numbers(ch1_numbers):
    """Each Evidence table changes when the data does: the per-step comparison, the prefixes and the
    fp32-to-fp64 shrinkage; the setup names the procedure and the weights."""
    import copy

    from kvutils.report import cache_exactness as report

    n = ch1_numbers["tiny-llama"]["float32"]["decode"]["n_prompts"]
    setup = report.setup_text(ch1_numbers)
    assert f"no-cache side: one pass, {n} prompts" in setup and "Weights: tiny-llama: random weights (seeded)" in setup
    per_step = report.per_step_table(ch1_numbers)
    assert set(per_step["the same divergences as one pass"]) == {"yes"}
    assert (per_step["time per prompt ÷ one pass"].astype(float) > 0).all()
    assert any(o.replace(".", "", 1).isdigit() for o in report.shrink_table(ch1_numbers)["orders of magnitude"])

    changed = copy.deepcopy(ch1_numbers)
    d = changed["tiny-llama"]["float32"]
    d["decode_per_step"]["first_divergence"][0] = 0
    d["prefixes"]["max_key_diff_alone_vs_inside"] = 0.0
    assert report.per_step_table(changed).loc["tiny-llama, float32", "the same divergences as one pass"] == "no"
    assert report.shrink_table(changed).loc["tiny-llama", "orders of magnitude"] == "none (exactly 0 already in fp32)"
    assert report.prefix_table(changed).loc["tiny-llama, float32", "largest key difference alone vs inside"] == "0"
    for r in changed.values():
        for x in r.values():
            x.pop("decode_per_step")
    assert report.per_step_table(changed) is None
