"""Chapter 5: bad parameters fail in the first cell before any model loads; the quick profile's
results hold the switch identities (tail patch == recompute, stale only in the tail, the activated
adapter's exact prefix, the patch map's control)."""
import json

import pytest
from conftest import run_failing_chapter

from kvutils import models, switch

GOOD = dict(models="tiny-qwen3", k_values="1,2,L", activated_k=2, rank=4, alpha=8, targets="q,k,v,o,mlp",
            steps=2, lr=1e-2, batch_size=4, train_words="bank,bat", heldout_words="key", seed=0,
            marker="\nSense:", patch_k=2, patch_layer_groups=2, bench_tokens=16, timing_repeats=1,
            dtype="float32", senses_file="data/senses.json", device="cpu")


@pytest.mark.parametrize("change, message", [
    (dict(k_values="0,2"), r"k_values: k=0 is not allowed for tiny-qwen3, which has 4 layers; k must be an integer from 1 to 4"),
    (dict(k_values="1,5"), r"k_values: k=5 is not allowed for tiny-qwen3, which has 4 layers"),
    (dict(k_values="1,two"), r"k_values: k='two' is not allowed"),
    (dict(models="tiny-llama", k_values="1,4"), r"k_values: k=4 is not allowed for tiny-llama, which has 2 layers"),
    (dict(activated_k=9), r"activated_k: k=9 is not allowed for tiny-qwen3"),
    (dict(patch_k=3), r"patch_k: 3 \(k=3\) is not one of the trained k_values \[1, 2, 4\]"),
    (dict(rank=0), r"rank must be >= 1, got 0"),
    (dict(marker="..Sense:"), r"marker: '\.\.Sense:' tokenises differently after the text than alone .* never find its invocation tokens"),
    (dict(heldout_words="key,bat"), r"train_words and heldout_words overlap \(bat\)"),
    (dict(train_words="bank,riverbank"), r"train_words: 'riverbank' not in the senses file"),
    (dict(heldout_words=""), r"heldout_words must name at least one word"),
    (dict(targets="q,gate"), r"targets: 'gate' not allowed; give one or more of q, k, v, o, mlp"),
    (dict(patch_layer_groups=5), r"patch_layer_groups must be between 1 and 4"),
    (dict(dtype="float16"), r"dtype: 'float16' is not allowed"),
    (dict(lr=0), r"lr must be a number > 0"),
    (dict(models="tiny-bert"), r"models: tiny-bert is a bidirectional encoder"),
])
def test_bad_parameters_fail_before_any_model_loads(change, message, no_model_loads):
    with pytest.raises(ValueError, match=message):
        switch.plan(**{**GOOD, **change})


def test_an_unknown_architecture_is_named(no_model_loads, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", "num_hidden_layers": 2}))
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, tmp_path / "model.safetensors")  # a complete folder, of another architecture
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=r"models: .* has architecture 'mamba'.*known architectures: llama, qwen3"):
        switch.plan(**{**GOOD, "models": str(tmp_path)})


def test_a_hub_model_without_weights_says_how_to_get_them(no_model_loads, tmp_path, monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(models.ModelNotAvailable, match=r"hf download Qwen/Qwen3-0.6B"):
        switch.plan(**{**GOOD, "models": "Qwen/Qwen3-0.6B"})


def test_the_plan_knows_l_from_the_config():
    p = switch.plan(**GOOD)
    mp = p.models[0]
    assert (mp.n_layers, mp.k_values, mp.activated_k, mp.model_type) == (4, [1, 2, 4], 2, "qwen3")
    assert mp.prefix_tokens == ["The", "⟨word⟩"]
    assert {e.word for e in mp.heldout} == {"key"} and len(mp.train) == 2 * 2 * 4


def test_notebook_stops_in_its_first_cell_on_a_bad_k(tmp_path):
    error, cell = run_failing_chapter("05", tmp_path, {"k_values": "1,9"})
    assert "k_values: k=9 is not allowed" in error and "switch.plan(" in cell


def test_chapter5_quick_results_hold_the_identities(quick_chapters):
    root, _ = quick_chapters
    record = json.loads((root / "results" / "05_qwen3_switch.json").read_text())
    assert record["parameters"]["models"] == "tiny-qwen3"
    r = record["numbers"]["tiny-qwen3"]
    n_layers = r["layers"]
    assert n_layers == 4 and r["k_values"][-1] == n_layers
    for k in r["k_values"]:
        scores, layers = r["switch"]["scores"][f"tail{k}"], r["switch"]["cache_layers"][f"tail{k}"]
        assert scores["tail_patch"]["max_abs_logit_diff"] <= switch.TOLERANCE["float32"]
        assert max(layers["tail_patch"]) <= switch.TOLERANCE["float32"]
        assert layers["stale"][:n_layers - k] == [0.0] * (n_layers - k)
        assert all(d > 0 for d in layers["stale"][n_layers - k:])
        assert scores["stale"]["max_abs_logit_diff"] > 0
        cost = r["cost"]["per_k"][str(k)]
        assert cost["tail_flops_fraction"] == pytest.approx(k / n_layers, rel=0.2)
        assert cost["stale"]["flops"] == 0
    assert all(d == 0 for d in r["switch"]["cache_layers"]["activated"]["prefix_vs_base"] if d is not None)
    assert r["patching"]["prefix_kv_max_diff"] == 0 and r["patching"]["control_max_abs_delta"] <= 1e-5
    assert r["patching"]["row_labels"][:2] == ["The", "⟨word⟩"]
    for name, adapter in r["training"]["adapters"].items():
        assert len(adapter["losses"]) == record["parameters"]["steps"]
    for figure in ("05_loss_curves", "05_accuracy_vs_k", "05_cost_vs_exactness", "05_patching_map"):
        assert (root / "results" / "figures" / f"{figure}.png").stat().st_size > 10_000


def test_the_benchmark_reports_the_tail_patch_against_a_recompute():
    fractions = switch.bench("tiny-qwen3", "1,L", tokens=16, repeats=1)
    assert list(fractions) == ["1", "4"]
    assert fractions["1"]["flops_fraction"] == pytest.approx(0.25, rel=0.2)
    assert fractions["4"]["flops_fraction"] == 1.0 and fractions["1"]["time_fraction"] > 0
