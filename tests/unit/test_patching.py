"""Cache patching: the generic patch, its setters, the context manager's restore-on-error, and
the built-in control — entries identical in both runs change nothing when copied."""
import copy

import pytest
import torch
from conftest import load_cached
from transformers import DynamicCache

from kvutils.lora import patching
from kvutils.lora.boundary import copy_cache
from kvutils.lora.switching import answer_logits
from kvutils.lora.tails import invocation_tokens, lora_tail

A = "The bank of the river was muddy after the heavy storm."
B = "The bank approved the loan for the new house last week."
MARKER = "\nSense:"


def _prefill(loaded, text):
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids
    cache = DynamicCache(config=loaded.model.config)
    with torch.no_grad():
        loaded.model(input_ids=ids, cache=cache, use_cache=True)
    return cache


def _prefill_sharing_the_prefix(loaded, prefix, texts):
    """The shared prefix prefilled once, each text's rest appended to a copy (as a server with prefix
    caching does): the prefix entries are then the same bits in every cache. Prefilled apart, fp32
    kernels may round them differently for different lengths (chapter 1)."""
    prefix_ids = loaded.tokenizer(prefix, return_tensors="pt").input_ids
    shared = DynamicCache(config=loaded.model.config)
    caches = []
    with torch.no_grad():
        loaded.model(input_ids=prefix_ids, cache=shared, use_cache=True)
        for text in texts:
            ids = loaded.tokenizer(text, return_tensors="pt").input_ids
            assert torch.equal(ids[:, :prefix_ids.shape[1]], prefix_ids)
            cache = copy_cache(shared)
            loaded.model(input_ids=ids[:, prefix_ids.shape[1]:], cache=cache, use_cache=True)
            caches.append(cache)
    return caches


def _snapshot(cache):
    return [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]


def _same(cache, snapshot):
    return all(torch.equal(layer.keys, k) and torch.equal(layer.values, v)
               for layer, (k, v) in zip(cache.layers, snapshot))


def _marker(loaded):
    return torch.tensor([invocation_tokens(loaded.tokenizer, MARKER)])


@pytest.mark.parametrize("name", ["tiny-qwen3", "tiny-qwen2", "tiny-llama", "tiny-gemma3"])
def test_patching_the_shared_prefix_changes_nothing(name):
    loaded = load_cached(name, "float32")
    target, source = _prefill_sharing_the_prefix(loaded, "The bank", [A, B])
    prefix_len = len(loaded.tokenizer("The bank").input_ids)
    cells = [patching.Patch(layers=tuple(range(loaded.n_layers)), positions=tuple(range(prefix_len))),
             patching.Patch(layers=(0,), positions=(prefix_len,))]  # a continuation token: changes
    before = _snapshot(target)
    out, clean = patching.patch_grid(
        target, source, cells, lambda cache, n: answer_logits(loaded.model, None, cache, _marker(loaded).repeat(n, 1)))
    # the control copies bit-identical entries: the answer moves at most by the rounding of a batch
    # row (multi-threaded CPU kernels need not round every row of a batch the same way)
    assert (out[0] - clean[0]).abs().max() <= 1e-5
    assert (out[1] - clean[1]).abs().max() > 1e-3
    assert _same(target, before)


def test_copy_then_restore_and_the_setters():
    loaded = load_cached("tiny-qwen3", "float32")
    target, source = _prefill(loaded, A), _prefill(loaded, B)
    before = _snapshot(target)
    patch = patching.Patch(layers=(1, 3), positions=(4, 6), parts=("keys",))
    with patching.patched(target, [patch], source):
        for layer in (1, 3):
            assert torch.equal(target.layers[layer].keys[:, :, [4, 6]], source.layers[layer].keys[:, :, [4, 6]])
            assert torch.equal(target.layers[layer].values, before[layer][1])  # values untouched
        assert torch.equal(target.layers[0].keys, before[0][0])
    assert _same(target, before)
    with patching.patched(target, [patching.Patch(layers=(2,), positions=(0,))], setter=patching.zero):
        assert target.layers[2].keys[:, :, 0].abs().max() == 0
    assert _same(target, before)


def test_the_cache_is_restored_after_an_exception():
    loaded = load_cached("tiny-llama", "float32")
    target, source = _prefill(loaded, A), _prefill(loaded, B)
    before = _snapshot(target)
    with pytest.raises(RuntimeError, match="boom"):
        with patching.patched(target, [patching.Patch(layers=(0, 1), positions=(3, 4, 5))], source):
            assert not _same(target, before)
            raise RuntimeError("boom")
    assert _same(target, before)


def test_a_failing_patch_half_way_is_undone():
    loaded = load_cached("tiny-llama", "float32")
    target, source = _prefill(loaded, A), _prefill(loaded, B)
    before = _snapshot(target)
    good = patching.Patch(layers=(0,), positions=(2,))
    beyond = patching.Patch(layers=(1,), positions=(500,))
    with pytest.raises(ValueError, match=r"layer 1 holds positions 0\.\.\d+; cannot patch \[500\]"):
        with patching.patched(target, [good, beyond], source):
            pass
    assert _same(target, before)


def test_rows_patch_only_their_batch_row():
    loaded = load_cached("tiny-qwen3", "float32")
    target, source = _prefill(loaded, A), _prefill(loaded, B)
    grid = patching.expand(target, 3)
    patching.patch_cache(grid, [patching.Patch(layers=(2,), positions=(5,), rows=(1,))], source)
    keys = grid.layers[2].keys
    assert torch.equal(keys[1, :, 5], source.layers[2].keys[0, :, 5])
    assert torch.equal(keys[0], target.layers[2].keys[0]) and torch.equal(keys[2], target.layers[2].keys[0])


def test_bad_patches_are_refused():
    with pytest.raises(ValueError, match="at least one layer and one position"):
        patching.Patch(layers=(), positions=(1,))
    with pytest.raises(ValueError, match=r"Patch.parts: \['queries'\] not allowed"):
        patching.Patch(layers=(0,), positions=(1,), parts=("queries",))


def test_the_answer_map_control_is_measured_from_each_contexts_own_pass(monkeypatch):
    """Each context's cache comes from its own forward pass, so the control really tests that the
    shared prefix's entries do not depend on what follows; a cache whose prefix entries differ is
    reported, not assumed away."""
    loaded = load_cached("tiny-qwen3", "float32")
    model = lora_tail(copy.deepcopy(loaded.model), 2, 4, 8, adapter_name="t", random_init=True, seed=1)
    tok = loaded.tokenizer
    a, b = tok(A).input_ids, tok(B).input_ids
    prefix_len = len(tok("The bank").input_ids)
    marker = invocation_tokens(tok, MARKER)
    own, other = tok(" river", add_special_tokens=False).input_ids[0], tok(" finance", add_special_tokens=False).input_ids[0]
    cols = [(0, 1), (2, 3), (0, 1, 2, 3)]
    out = patching.answer_map(model, "t", [(a, b, own, other)], marker, prefix_len, cols, 4, 2)
    assert out["prefix_kv_max_diff"] == 0 and out["control_max_abs_delta"] <= 1e-5
    assert out["control_rows"] == prefix_len and len(out["flip_pct"]) == prefix_len + 2 + 1
    passes = []
    real = patching.own_cache

    def shifted(model_, adapter, ids, device):  # a model whose prefix entries depend on the continuation
        cache = real(model_, adapter, ids, device)
        passes.append(list(ids))
        if list(ids) == b:
            cache.layers[3].keys[:, :, 0] += 1e-3
        return cache

    monkeypatch.setattr(patching, "own_cache", shifted)
    out = patching.answer_map(model, "t", [(a, b, own, other)], marker, prefix_len, cols, 4, 2)
    assert passes == [a, b]  # one pass per context, over the whole context
    assert out["prefix_kv_max_diff"] == pytest.approx(1e-3, rel=1e-3) and out["control_max_abs_delta"] > 0


def test_the_map_counts_flips_only_where_the_clean_adapter_is_right():
    """Each cell's n is the pairs the unpatched adapter answers right, so a flip is a right answer
    turned wrong; a wrong answer turned right is not counted (a map that counted every pair would say
    2 of 3). The mean change of the log-odds is over every pair."""
    clean = [2.0, -1.0, 3.0]
    after = [[[-1.0]], [[1.0]], [[3.0]]]  # pair 0 turns wrong, pair 1 turns right, pair 2 stays
    before = [[[2.0]], [[-1.0]], [[3.0]]]
    out = patching.summarise_map({"clean": clean, "patched": after, "unpatched": before,
                                  "foreign_patched": [None] * 3, "foreign_unpatched": [None] * 3}, 1, 1, 0)
    assert out["count"] == [[2]] and out["flips"] == [[1]] and out["flip_pct"] == [[50.0]]
    assert out["n_clean_right"] == 2 and out["delta_logodds_mean"] == [[pytest.approx((-3.0 + 2.0 + 0.0) / 3)]]
    assert out["foreign_control"] is None
