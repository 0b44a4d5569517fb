"""The LoRA tail and the switch policies on tiny random models of three families: what stays
exact, what goes stale, and that training through the tail alone learns.

Tolerances: float64 runs compare the tail patch with the full recompute at ≤ 1e-9 (the theorem;
in practice the two are bit-identical); bit-identity claims (lower layers, the activated
adapter's prefix) are asserted as a max |difference| of exactly 0. Every adapter here starts random
(`random_init=True`), so "stale" really differs.
"""
import copy
import dataclasses

import pytest
import torch
from conftest import load_cached

import kvutils
from kvutils.lora import families
from kvutils.lora.boundary import (
    boundary_states,
    copy_cache,
    efficient_head,
    marker_logits,
    select_rows,
    states_and_prefix_cache,
    tail_logits,
)
from kvutils.lora.families import family_of
from kvutils.lora.schedule import lr_factor
from kvutils.lora.switching import answer_logits, base_prefill, layer_differences, nan_max, switch_cache
from kvutils.lora.tails import active_adapter, adapter_parameters, check_marker, first_changed_layer, invocation_tokens, lora_tail
from kvutils.lora.training import Batch, left_pad, resolve_train_dtype, step_loss, train_adapter

FAMILIES = ["tiny-qwen3", "tiny-qwen2", "tiny-llama", "tiny-gemma3"]
TEXT = "The bank of the river was muddy after the heavy storm."
MARKER = "\nSense:"


def _fresh(name: str, dtype: str):
    """A private copy of the session's tiny model (peft modifies the model it wraps)."""
    shared = load_cached(name, dtype)
    return dataclasses.replace(shared, model=copy.deepcopy(shared.model))


def _adapted(name: str, k: int, dtype: str = "float64", targets: str = "q,k,v,o,mlp", activated: bool = False):
    """A fresh model with one random tail adapter."""
    loaded = _fresh(name, dtype)
    marker = invocation_tokens(loaded.tokenizer, MARKER) if activated else None
    model = lora_tail(loaded.model, k, 4, 8, targets, adapter_name="ad", invocation_tokens=marker,
                           random_init=True, seed=1)
    return loaded, model


def _ids(loaded, text=TEXT):
    return loaded.tokenizer(text, return_tensors="pt").input_ids  # (1, seq)


@pytest.mark.parametrize("name", FAMILIES)
def test_tail_patch_equals_recompute_and_stale_differs_only_in_the_tail(name):
    loaded, model = _adapted(name, k=2)
    n_layers = loaded.n_layers
    ids = _ids(loaded)
    marker = _ids(loaded, MARKER)[:, -len(invocation_tokens(loaded.tokenizer, MARKER)):]
    prefilled = base_prefill(model, ids, [n_layers - 2])
    caches = {p: switch_cache(model, p, prefilled, ids, "ad", 2) for p in ("recompute", "stale", "tail_patch")}
    length = ids.shape[-1]
    stale = layer_differences(caches["stale"], caches["recompute"], length)
    patch = layer_differences(caches["tail_patch"], caches["recompute"], length)
    assert stale[:n_layers - 2] == [0.0] * (n_layers - 2)  # lower layers: bit-identical to the base cache
    assert all(d > 1e-3 for d in stale[n_layers - 2:])  # the tail: stale
    assert max(patch) <= 1e-9
    logits = {p: answer_logits(model, "ad", copy_cache(c), marker) for p, c in caches.items()}
    assert (logits["tail_patch"] - logits["recompute"]).abs().max() <= 1e-9
    assert (logits["stale"] - logits["recompute"]).abs().max() > 1e-3


@pytest.mark.parametrize("name", FAMILIES)
def test_lower_layer_kv_bit_identical_between_base_and_tail_adapted(name):
    loaded, model = _adapted(name, k=1, dtype="float32")
    ids = _ids(loaded)
    base = base_prefill(model, ids, []).kv
    adapted = switch_cache(model, "recompute", None, ids, "ad", 1)
    diffs = layer_differences(base, adapted, ids.shape[-1])
    assert diffs[:-1] == [0.0] * (loaded.n_layers - 1) and diffs[-1] > 0


def test_full_adapter_makes_every_layer_stale():
    loaded, model = _adapted("tiny-qwen3", k=4)
    ids = _ids(loaded)
    base = base_prefill(model, ids, [0])
    recompute = switch_cache(model, "recompute", base, ids, "ad", 4)
    patch = switch_cache(model, "tail_patch", base, ids, "ad", 4)  # k = L: from the embeddings
    assert all(d > 0 for d in layer_differences(base.kv, recompute, ids.shape[-1]))
    assert max(layer_differences(patch, recompute, ids.shape[-1])) <= 1e-9


def test_an_adapter_without_k_v_leaves_its_first_layer_exact():
    loaded, model = _adapted("tiny-qwen3", k=2, targets="q,o,mlp")
    ids = _ids(loaded)
    base = base_prefill(model, ids, [])
    diffs = layer_differences(base.kv, switch_cache(model, "recompute", base, ids, "ad", 2), ids.shape[-1])
    first = first_changed_layer(4, 2, ["q", "o", "mlp"], families.FAMILIES["qwen3"])
    assert first == 3 and diffs[:first] == [0.0] * first and diffs[first] > 0
    assert first_changed_layer(4, 2, ["q"], families.FAMILIES["gpt_neox"]) == 2  # q, k, v fused


@pytest.mark.parametrize("name", FAMILIES)
def test_activated_adapter_leaves_the_prefix_kv_of_the_base(name):
    loaded, model = _adapted(name, k=loaded_layers(name), activated=True)
    full = _ids(loaded, TEXT + MARKER)  # one pass over prefix + marker
    prefix_len = _ids(loaded).shape[-1]
    from transformers import DynamicCache

    caches = {}
    for adapter in (None, "ad"):
        cache = DynamicCache(config=model.config)
        with active_adapter(model, adapter), torch.no_grad():
            model(input_ids=full, cache=cache, use_cache=True)
        caches[adapter] = cache
    prefix = layer_differences(caches[None], caches["ad"], prefix_len)
    assert prefix == [0.0] * loaded.n_layers
    whole = layer_differences(caches[None], caches["ad"], full.shape[-1])
    assert whole[-1] > 0  # the marker's own entries do see the adapter


def loaded_layers(name):
    return {"tiny-qwen3": 4, "tiny-qwen2": 4, "tiny-llama": 2, "tiny-gemma3": 6}[name]


def test_skipping_lower_layers_from_the_boundary_gives_the_same_logits():
    loaded, model = _adapted("tiny-gemma3", k=3)
    ids, mask = left_pad([[5, 6, 7, 8, 9], [11, 12, 13]], 0)
    full = tail_logits(model, model.get_input_embeddings()(ids), mask, 0)
    boundary = boundary_states(model, ids, mask, [3])[3]
    model.set_adapter("ad")
    tail = tail_logits(model, boundary, mask, 3)
    assert (tail - full).abs().max() <= 1e-9


@pytest.mark.parametrize("train_dtype", ["float32", "bfloat16"])
def test_training_the_tail_reduces_the_loss(train_dtype):
    """A toy task on the tiny Qwen3, fixed seed: only the tail runs, the loss falls — in float32 and
    under bfloat16 autocast, whose LoRA weights stay float32."""
    loaded = _fresh("tiny-qwen3", "float32")
    model = lora_tail(loaded.model, 2, 4, 8, "q,k,v,o,mlp", adapter_name="t", seed=0)
    rows = [[10 + i, 20 + i, 30 + i, 7, 8] for i in range(8)]
    ids, mask = left_pad(rows, 0)
    batch = Batch(ids, mask, torch.tensor([100 + i % 2 for i in range(8)]), 2)
    boundary = boundary_states(model, ids, mask, [2])[2]
    losses = train_adapter(model, "t", boundary, batch, 2, steps=15, lr=3e-2, batch_size=4, seed=3,
                                train_dtype=train_dtype)
    assert {p.dtype for p in adapter_parameters(model, "t")} == {torch.float32}
    weights = {n: p for n, p in model.named_parameters() if "lora_" not in n}
    assert {p.dtype for p in weights.values()} == {torch.float32}
    base = dict(load_cached("tiny-qwen3", "float32").model.named_parameters())  # what _fresh copied
    assert len(weights) == len(base)
    assert all(torch.equal(p, base[n.removeprefix("base_model.model.").replace(".base_layer", "")])
               for n, p in weights.items())  # untouched
    # a random tiny model's frozen head bounds how far the loss can fall (~10.8 -> ~10 nats)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.4
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable == []  # gradients are switched off again after training


def test_the_cosine_schedule_warms_up_then_decays_to_zero():
    steps, warmup = 10, 3
    factors = [lr_factor(s, steps, "cosine", warmup) for s in range(steps)]
    assert factors[:warmup] == pytest.approx([1 / 4, 2 / 4, 3 / 4])  # a linear rise, never 0
    assert factors[warmup] < 1 and all(a > b for a, b in zip(factors[warmup:], factors[warmup + 1:]))
    assert factors[-1] == 0.0  # the last step's rate: half a cosine has run out
    assert lr_factor(5, steps, "constant", warmup) == 1.0
    with pytest.raises(ValueError, match="schedule: 'linear' is not allowed; choose one of constant, cosine"):
        lr_factor(0, steps, "linear", 0)


def _trained_tiny_qwen2(**options) -> tuple[list[float], object, object, object]:
    loaded = _fresh("tiny-qwen2", "float32")
    model = lora_tail(loaded.model, 2, 4, 8, "q,k,v,o,mlp", adapter_name="t", seed=0)
    ids, mask = left_pad([[10 + i, 20 + i, 30 + i, 7, 8] for i in range(8)], 0)
    targets = torch.tensor([100 + i % 2 for i in range(8)])
    batch = Batch(ids, mask, targets, 2, others=torch.tensor([101 - i % 2 for i in range(8)]))
    boundary = boundary_states(model, ids, mask, [2])[2]
    losses = train_adapter(model, "t", boundary, batch, 2, steps=12, lr=3e-2, batch_size=4, seed=3, **options)
    return losses, model, boundary, batch


@pytest.mark.parametrize("options", [dict(schedule="cosine", warmup=3), dict(loss="answers"),
                                     dict(loss="answers", schedule="cosine", warmup=2)])
def test_every_training_option_trains_the_tiny_qwen2(options):
    """The options on the tiny Qwen2 (QKV bias): the loss falls, and the "answers" loss is the
    two-way cross-entropy of the right answer's logit against the wrong one's (ln 2 for a coin)."""
    losses, model, boundary, batch = _trained_tiny_qwen2(**options)
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 - 0.05
    if options.get("loss") == "answers":
        assert losses[0] < 1.5  # two answers, not a vocabulary of thousands (~10 nats)
        logits = tail_logits(model, boundary, batch.mask, 2)
        pair = torch.stack([logits[torch.arange(8), batch.targets], logits[torch.arange(8), batch.others]], 1)
        assert step_loss(logits, batch, slice(None), "answers").item() == pytest.approx(
            torch.nn.functional.cross_entropy(pair, torch.zeros(8, dtype=torch.long)).item())
        assert step_loss(logits, batch, slice(None), "vocab").item() > step_loss(logits, batch, slice(None), "answers").item()


def test_clipping_bounds_every_gradient_the_optimizer_steps_with():
    """max_grad_norm scales the adapter's whole gradient down to that norm before each step (the
    gradient after the step is the one AdamW used); 0 leaves it as it is; a negative norm is named."""
    def trained(norm: float) -> tuple[list[float], list[float]]:
        loaded = _fresh("tiny-qwen2", "float32")
        model = lora_tail(loaded.model, 2, 4, 8, "q,k,v,o,mlp", adapter_name="t", seed=0)
        ids, mask = left_pad([[10 + i, 20 + i, 30 + i, 7, 8] for i in range(8)], 0)
        batch = Batch(ids, mask, torch.tensor([100 + i % 2 for i in range(8)]), 2)
        boundary = boundary_states(model, ids, mask, [2])[2]
        norms = []

        def on_step(step, loss):
            grads = [p.grad for p in adapter_parameters(model, "t")]
            norms.append(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item())
        losses = train_adapter(model, "t", boundary, batch, 2, steps=6, lr=3e-2, batch_size=4, seed=3,
                               on_step=on_step, max_grad_norm=norm)
        return losses, norms

    free_losses, free_norms = trained(0.0)
    clip = min(free_norms) / 4  # below every unclipped gradient: each step is clipped
    losses, norms = trained(clip)
    assert norms == pytest.approx([clip] * len(norms), rel=1e-5)
    assert losses[0] == free_losses[0] and losses[1:] != free_losses[1:]  # same start, another path
    loaded = _fresh("tiny-qwen2", "float32")
    model = lora_tail(loaded.model, 1, 2, 4, "q,v", adapter_name="t", seed=0)
    ids, mask = left_pad([[3, 4, 5]], 0)
    with pytest.raises(ValueError, match="max_grad_norm: -1.0 is not allowed"):
        train_adapter(model, "t", boundary_states(model, ids, mask, [1])[1], Batch(ids, mask, torch.tensor([1]), 1), 1,
                      steps=1, lr=1e-2, batch_size=1, seed=0, max_grad_norm=-1.0)


def test_the_answers_loss_needs_the_wrong_answers_and_a_known_loss_is_named():
    loaded = _fresh("tiny-qwen2", "float32")
    model = lora_tail(loaded.model, 1, 2, 4, "q,v", adapter_name="t", seed=0)
    ids, mask = left_pad([[3, 4, 5], [6, 7, 8, 9]], 0)
    boundary = boundary_states(model, ids, mask, [1])[1]
    with pytest.raises(ValueError, match="needs the batch's wrong answers"):
        train_adapter(model, "t", boundary, Batch(ids, mask, torch.tensor([1, 2]), 1), 1, steps=1, lr=1e-2,
                      batch_size=2, seed=0, loss="answers")
    with pytest.raises(ValueError, match="loss: 'hinge' is not allowed; choose one of vocab, answers"):
        train_adapter(model, "t", boundary, Batch(ids, mask, torch.tensor([1, 2]), 1), 1, steps=1, lr=1e-2,
                      batch_size=2, seed=0, loss="hinge")


def test_training_is_seeded():
    def run():
        loaded = _fresh("tiny-llama", "float32")
        model = lora_tail(loaded.model, 1, 2, 4, "q,v", adapter_name="t", seed=0)
        ids, mask = left_pad([[3, 4, 5], [6, 7, 8, 9]], 0)
        boundary = boundary_states(model, ids, mask, [1])[1]
        return train_adapter(model, "t", boundary, Batch(ids, mask, torch.tensor([1, 2]), 1), 1,
                                  steps=3, lr=1e-2, batch_size=1, seed=5)
    assert run() == run()


def test_family_mapping_covers_neox_and_names_unknown_architectures():
    loaded = _fresh("tiny-neox", "float32")
    model = lora_tail(loaded.model, 1, 2, 4, "k,o", adapter_name="t")
    wrapped = [n for n, _ in model.named_modules() if n.endswith("lora_A.t")]
    assert wrapped and all(".layers.1." in n for n in wrapped)
    assert {n.split(".")[-3] for n in wrapped} == {"query_key_value", "dense"}
    with pytest.raises(ValueError, match=r"architecture 'mamba'.*known architectures: llama, qwen3"):
        family_of("mamba", "state-spaces/mamba-130m")


@pytest.mark.parametrize("k", [0, 5])
def test_k_outside_the_layers_is_refused(k):
    loaded = _fresh("tiny-qwen3", "float32")
    with pytest.raises(ValueError, match=rf"k={k} is not allowed .* 4 layers; k must be an integer from 1 to 4"):
        lora_tail(loaded.model, k, 4, 8)


def test_rank_below_one_is_refused():
    loaded = _fresh("tiny-qwen3", "float32")
    with pytest.raises(ValueError, match=r"rank: r=0 is not allowed"):
        lora_tail(loaded.model, 1, 0, 8)


def test_a_marker_that_merges_with_the_text_is_explained():
    tokenizer = kvutils.models.loading.load_tokenizer("tiny-qwen3")
    assert check_marker(tokenizer, [TEXT], MARKER) == invocation_tokens(tokenizer, MARKER)
    with pytest.raises(ValueError, match=r"marker: '\.\.Sense:' tokenises differently .* never find its invocation"):
        check_marker(tokenizer, [TEXT], "..Sense:")


def test_nan_max_keeps_a_nan_wherever_it_stands_and_skips_none():
    import math

    assert math.isnan(nan_max([float("nan"), 1.0])) and math.isnan(nan_max([1.0, float("nan")]))
    assert nan_max([None, 2.0, 1.0]) == 2.0 and nan_max([None]) is None


def test_a_nan_in_a_cache_shows_in_its_layer_difference():
    loaded = _fresh("tiny-qwen3", "float32")
    ids = _ids(loaded)
    base = base_prefill(loaded.model, ids, []).kv
    broken = base_prefill(loaded.model, ids, []).kv
    broken.layers[1].values[0, 0, -1, -1] = float("nan")  # after finite entries: max() over the layer would drop it
    diffs = layer_differences(base, broken, ids.shape[-1])
    assert diffs[0] == 0.0 and diffs[1] != diffs[1]


@pytest.mark.parametrize("name", FAMILIES)
def test_the_base_pass_in_chunks_equals_one_pass(name):
    """`states_and_prefix_cache` a few rows at a time == over the whole batch at once (float64): the
    boundary states and every layer's prefix K/V, the rows in order."""
    loaded, model = _adapted(name, k=2, activated=True)
    marker = invocation_tokens(loaded.tokenizer, MARKER)
    m, start = len(marker), loaded.n_layers - 2
    rows = [[5 + i, 6, 7 + i, 8, 9] + marker for i in range(5)] + [[11, 12] + marker]
    ids, mask = left_pad(rows, 0)
    whole, whole_cache = states_and_prefix_cache(model, ids, mask, [0, start], m, rows=len(rows))
    parts, parts_cache = states_and_prefix_cache(model, ids, mask, [0, start], m, rows=2)
    for layer in (0, start):
        assert (whole[layer] - parts[layer]).abs().max() <= 1e-12
    for a, b in zip(whole_cache.layers, parts_cache.layers):
        assert a.keys.shape == b.keys.shape and (a.keys - b.keys).abs().max() <= 1e-12
        assert (a.values - b.values).abs().max() <= 1e-12


@pytest.mark.parametrize("name", FAMILIES)
def test_an_activated_adapter_trained_on_the_marker_alone_gets_the_full_pass_logits_and_gradients(name):
    """`marker_logits` on the base cache of the prefix == `tail_logits` over the whole left-padded
    sequence with the invocation offsets, in value and in every LoRA weight's gradient (float64)."""
    loaded, model = _adapted(name, k=2, activated=True)
    marker = invocation_tokens(loaded.tokenizer, MARKER)
    m, start = len(marker), loaded.n_layers - 2
    rows = [[5, 6, 7, 8, 9, 10] + marker, [11, 12, 13, 14] + marker, [21, 22, 23, 24, 25] + marker]
    ids, mask = left_pad(rows, 0)
    states, cache = states_and_prefix_cache(model, ids, mask, [start], m)
    boundary = states[start]
    params = adapter_parameters(model, "ad")
    model.set_adapter("ad")
    grads = {}
    for path in ("whole", "marker"):
        for p in params:
            p.requires_grad_(True)
            p.grad = None
        chosen = [2, 0]  # rows out of order: the cache's rows must follow
        if path == "whole":
            logits = tail_logits(model, boundary[chosen], mask[chosen], start, [m] * 2)
        else:
            logits = marker_logits(model, boundary[chosen], mask[chosen], start, m, select_rows(cache, chosen))
        logits.sum().backward()
        grads[path] = (logits.detach(), [p.grad.clone() for p in params])
    assert cache.get_seq_length() == ids.shape[-1] - m  # select_rows left the stored cache as it was
    assert (grads["whole"][0] - grads["marker"][0]).abs().max() <= 1e-9
    assert max((a - b).abs().max().item() for a, b in zip(grads["whole"][1], grads["marker"][1])) <= 1e-9
    assert max(g.abs().max().item() for g in grads["marker"][1]) > 0  # a gradient that reaches the adapter


def test_a_prefix_cache_is_refused_for_a_lora_tail():
    loaded, model = _adapted("tiny-llama", k=1)
    ids, mask = left_pad([[3, 4, 5]], 0)
    with pytest.raises(ValueError, match="prefix_cache is for an activated adapter only"):
        train_adapter(model, "ad", ids, Batch(ids, mask, torch.tensor([1]), 1), 1, steps=1, lr=1e-3,
                           batch_size=1, seed=0, prefix_cache=object())


def test_auto_training_precision_is_bfloat16_only_where_it_is_native(monkeypatch):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert resolve_train_dtype("auto", "cpu") == "float32"
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    assert resolve_train_dtype("auto", "cpu") == "bfloat16"
    assert resolve_train_dtype("float32", "cpu") == "float32"  # an explicit choice is kept
    with pytest.raises(ValueError, match="train_dtype: 'half' is not allowed"):
        resolve_train_dtype("half", "cpu")


def test_the_head_under_autocast_multiplies_by_one_cast_it_keeps_and_equals_autocast():
    """`efficient_head` under bfloat16 autocast: the same logits as autocast's own cast, and the cast
    is made once (kept on the head) rather than at every call."""
    loaded = _fresh("tiny-qwen3", "float32")
    head = loaded.model.get_output_embeddings()
    hidden = torch.randn(3, 5, head.in_features)[:, -1:]  # a strided view, as logits_to_keep=1 gives
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = head(hidden)
        with efficient_head(loaded.model):
            first = head(hidden)
            kept = head._kvutils_cast[1]
            second = head(hidden)
            assert head._kvutils_cast[1] is kept
    assert first.dtype == torch.bfloat16 and torch.equal(first, expected) and torch.equal(second, expected)
    with efficient_head(loaded.model):
        assert head(hidden).dtype == torch.float32  # outside autocast the head is left as it is
    assert "forward" not in vars(head)  # the class's forward is back
