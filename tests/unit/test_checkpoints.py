"""A long job's units stored as they finish (kvutils.core.checkpoints), and resumed: the same numbers
whether a unit was computed or read back, in chapter 4's scoring and chapter 5's training."""
from __future__ import annotations

import copy
import hashlib
import json
import math

import pytest
import torch
from conftest import load_cached

from kvutils.cache import accept as acceptance
from kvutils.core import checkpoints
from kvutils.lora.boundary import boundary_states, cache_from_layers, cache_layers, new_cache
from kvutils.lora.tails import adapter_parameters, lora_tail
from kvutils.lora.training import CHECKPOINT_STEPS, Batch, left_pad, train_adapter


def test_a_unit_round_trips_tensors_and_json_and_is_written_whole(tmp_path):
    value = {"kl": torch.tensor([0.5, 1.5], dtype=torch.float64), "held": [torch.tensor([[True, False]])],
             "n": 3, "mean": math.nan, "label": "snapkv@0.25", "none": None, "step": torch.tensor(7.0),
             "nested": {"1": [1, (2, 3)]}}
    checkpoints.save(tmp_path, "accept-x:ratio=0.5", value)
    back = checkpoints.load(tmp_path, "accept-x:ratio=0.5")
    assert torch.equal(back["kl"], value["kl"]) and back["kl"].dtype == torch.float64
    assert torch.equal(back["held"][0], value["held"][0]) and back["step"].shape == ()
    assert back["n"] == 3 and math.isnan(back["mean"]) and back["label"] == "snapkv@0.25" and back["none"] is None
    assert back["nested"] == {"1": [1, [2, 3]]}  # tuples come back as lists
    assert [p.name for p in tmp_path.iterdir()] == [checkpoints.unit_path(tmp_path, "accept-x:ratio=0.5").name]
    assert checkpoints.load(tmp_path, "another key") is None
    with pytest.raises(TypeError, match="not set"):
        checkpoints.save(tmp_path, "bad", {"x": {1, 2}})
    assert len(list(tmp_path.iterdir())) == 1  # the failed unit left nothing behind


def test_stored_computes_once_per_key_and_nothing_without_a_folder(tmp_path, monkeypatch):
    calls = []

    def compute():
        calls.append(1)
        return {"x": torch.arange(3)}

    monkeypatch.delenv(checkpoints.ENV, raising=False)
    checkpoints.stored("a", compute)
    assert len(calls) == 1 and not any(tmp_path.iterdir())  # no folder: computed, stored nowhere
    monkeypatch.setenv(checkpoints.ENV, str(tmp_path))
    first, second = checkpoints.stored("a", compute), checkpoints.stored("a", compute)
    assert len(calls) == 2 and torch.equal(first["x"], second["x"])


def _numbers(run: dict) -> dict:
    """A run's numbers without its timings."""
    drop = {"seconds", "exact_seconds", "exact_decode_seconds_per_document", "seconds_per_document"}
    if isinstance(run, dict):
        return {k: _numbers(v) for k, v in run.items() if k not in drop}
    if isinstance(run, list):
        return [_numbers(v) for v in run]
    return run


def test_an_interrupted_scoring_resumes_at_its_group_with_the_same_numbers(tmp_path, monkeypatch):
    """Two groups of documents (STEP_BATCH each, the last shorter); a one-forward press, a
    token-by-token policy and a precision op. Computed, then read back whole, then with one group
    lost (an interruption): the same numbers each time, and only the lost group is scored again."""
    from kvutils.cache.scoring import STEP_BATCH

    loaded = load_cached("tiny-llama", "float32")
    texts = [" ".join(f"word{i * 7 + j}" for j in range(40)) for i in range(STEP_BATCH + 2)]
    specs = ["snapkv:compression_ratio=0.5,window=4", "h2o:compression_ratio=0.5", "quantize_naive:bits=4"]
    kwargs = dict(prefill=20, decode=12, progress=False)
    monkeypatch.delenv(checkpoints.ENV, raising=False)
    plain = acceptance.accept_many(loaded, specs, texts, **kwargs)
    monkeypatch.setenv(checkpoints.ENV, str(tmp_path))
    stored = acceptance.accept_many(loaded, specs, texts, **kwargs)
    units = sorted(tmp_path.iterdir())
    assert len(units) == 2 and _numbers(stored) == _numbers(plain)
    scored = []
    real = acceptance._score_group
    monkeypatch.setattr(acceptance, "_score_group", lambda *a, **k: (scored.append(a[3]), real(*a, **k)))
    assert _numbers(acceptance.accept_many(loaded, specs, texts, **kwargs)) == _numbers(plain) and scored == []
    checkpoints.remove(tmp_path, _key_of(units[1]))  # one group's unit lost, as if interrupted in it
    resumed = acceptance.accept_many(loaded, specs, texts, **kwargs)
    assert len(scored) == 1 and _numbers(resumed) == _numbers(plain)


def _key_of(unit) -> str:
    return json.loads((unit / checkpoints.TREE).read_text())["key"]


def _training(steps: int, on_step=None, checkpoint: str | None = None):
    loaded = load_cached("tiny-qwen2", "float32")
    model = lora_tail(copy.deepcopy(loaded.model), 2, 4, 8, "q,k,v,o,mlp", adapter_name="t", seed=0)
    ids, mask = left_pad([[10 + i, 20 + i, 30 + i, 7, 8] for i in range(8)], 0)
    batch = Batch(ids, mask, torch.tensor([100 + i % 2 for i in range(8)]), 2,
                  others=torch.tensor([101 - i % 2 for i in range(8)]))
    boundary = boundary_states(model, ids, mask, [2])[2]
    losses = train_adapter(model, "t", boundary, batch, 2, steps=steps, lr=3e-2, batch_size=3, seed=3,
                           schedule="cosine", warmup=4, loss="answers", on_step=on_step, checkpoint=checkpoint)
    return losses, [p.detach().clone() for p in adapter_parameters(model, "t")]


def test_an_interrupted_training_resumes_at_its_last_checkpoint_with_the_same_losses_and_weights(tmp_path,
                                                                                                  monkeypatch):
    """AdamW's moments, the cosine schedule's step and the seeded batch order (3 of 8 examples a
    step: the queue crosses epochs) are all put back: the resumed training ends where an
    uninterrupted one does."""
    steps = 2 * CHECKPOINT_STEPS + 5
    monkeypatch.delenv(checkpoints.ENV, raising=False)
    losses, weights = _training(steps)
    monkeypatch.setenv(checkpoints.ENV, str(tmp_path))

    def interrupt(step, loss):
        if step == CHECKPOINT_STEPS + 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _training(steps, interrupt, checkpoint="tiny-t")
    assert len(list(tmp_path.iterdir())) == 1  # the progress at step CHECKPOINT_STEPS
    seen = []
    resumed, resumed_weights = _training(steps, lambda step, loss: seen.append(step), checkpoint="tiny-t")
    assert seen[0] == CHECKPOINT_STEPS and resumed == losses
    assert not any(tmp_path.iterdir())  # finished: its progress is removed (the caller stores the adapter)
    assert all(torch.equal(a, b) for a, b in zip(weights, resumed_weights))


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama", "tiny-gemma3"])
def test_a_stored_cache_is_the_cache_again(name):
    """Chapter 5's base pass stores the prefix's K/V as tensors; the cache made from them holds the
    same K/V, and the same length, on every family (Gemma 3's sliding layers included)."""
    loaded = load_cached(name, "float32")
    ids, mask = left_pad([[3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13]], 0)
    cache = new_cache(loaded.model)
    boundary_states(loaded.model, ids, mask, [1], cache=cache)
    cache.crop(-2)
    again = cache_from_layers(loaded.model, cache_layers(cache))
    assert again.get_seq_length() == cache.get_seq_length()
    for a, b in zip(cache.layers, again.layers):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def _store_one(root, key="accept-x:ratio=0.5"):
    value = {"accuracy_pct": 56.25, "kl": torch.tensor([0.5, 1.5])}
    checkpoints.save(root, key, value)
    return key, checkpoints.unit_path(root, key)


def test_a_truncated_unit_is_computed_again_and_stderr_says_so(tmp_path, capsys):
    """`truncate -s 100` of a unit's tensors (safetensors' own error, "invalid header length",
    once escaped `load`): the unit is not read, its key is computed again and replaces it."""
    key, unit = _store_one(tmp_path)
    with open(unit / checkpoints.TENSORS, "r+b") as f:
        f.truncate(100)
    assert checkpoints.load(tmp_path, key) is None
    assert f"checkpoint: {key}" in capsys.readouterr().err
    calls = []
    value = checkpoints.stored(key, lambda: calls.append(1) or {"accuracy_pct": 56.25}, root=tmp_path)
    assert calls == [1] and value == {"accuracy_pct": 56.25}
    assert "computing it again" in capsys.readouterr().err
    assert checkpoints.load(tmp_path, key) == {"accuracy_pct": 56.25}  # the recomputed unit replaced it
    assert capsys.readouterr().err == ""


def test_a_unit_whose_tensors_safetensors_raises_is_not_fatal(tmp_path, capsys):
    """Past the sums (a unit written with them, then both edited alike): safetensors' error is caught."""
    key, unit = _store_one(tmp_path)
    (unit / checkpoints.TENSORS).write_bytes(b"\xff" * 100)
    sums = json.loads((unit / checkpoints.SUMS).read_text())
    sums[checkpoints.TENSORS] = hashlib.sha256(b"\xff" * 100).hexdigest()
    (unit / checkpoints.SUMS).write_text(json.dumps(sums))
    assert checkpoints.load(tmp_path, key) is None
    assert "SafetensorError" in capsys.readouterr().err


def test_an_edited_tree_json_is_never_trusted(tmp_path, capsys):
    """accuracy_pct 56.25 -> 99.0 in tree.json: its sha256 no longer matches, so the unit is recomputed."""
    key, unit = _store_one(tmp_path)
    tree = unit / checkpoints.TREE
    tree.write_text(tree.read_text().replace("56.25", "99.0"))
    assert checkpoints.load(tmp_path, key) is None
    assert "tree.json does not match the sha256" in capsys.readouterr().err
    value = checkpoints.stored(key, lambda: {"accuracy_pct": 56.25}, root=tmp_path)
    assert value["accuracy_pct"] == 56.25


@pytest.mark.parametrize("lost", [checkpoints.SUMS, checkpoints.TREE, checkpoints.TENSORS])
def test_a_unit_missing_a_file_is_unreadable(tmp_path, capsys, lost):
    key, unit = _store_one(tmp_path)
    (unit / lost).unlink()
    assert checkpoints.load(tmp_path, key) is None
    assert "cannot be read" in capsys.readouterr().err


def test_each_unit_records_the_sha256_of_its_files(tmp_path):
    _, unit = _store_one(tmp_path)
    sums = json.loads((unit / checkpoints.SUMS).read_text())
    assert sums == {name: hashlib.sha256((unit / name).read_bytes()).hexdigest()
                    for name in (checkpoints.TREE, checkpoints.TENSORS)}
