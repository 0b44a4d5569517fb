"""The exactness identities of causal attention, on a tiny random model of every family.

They are theorems about the architecture, so they hold on random weights. Each model and dtype has
its own stated tolerance: fp64 separates rounding from real differences (1e-9 on logits, 1e-12 on
K/V); fp32 bounds are a few hundred ulps of these models' logit / K/V scale.
"""
import pytest
import torch
from conftest import CAUSAL_TINY, load_cached

from kvutils.core import data
from kvutils.core.hooks import bert_key_modules, capture_outputs
from kvutils.models.greedy import greedy, prefill, recompute_logits
from kvutils.studies import cache_exactness as exactness

# max |logit difference| allowed between cached decoding and recomputation
LOGIT_TOL = {
    ("tiny-neox", "float64"): 1e-9, ("tiny-llama", "float64"): 1e-9,
    ("tiny-qwen3", "float64"): 1e-9, ("tiny-qwen2", "float64"): 1e-9, ("tiny-gemma3", "float64"): 1e-9,
    ("tiny-neox", "float32"): 2e-5, ("tiny-llama", "float32"): 2e-5,
    ("tiny-qwen3", "float32"): 2e-5, ("tiny-qwen2", "float32"): 2e-5, ("tiny-gemma3", "float32"): 2e-5,
}
# max |K/V difference| allowed for the same prefix computed in sequences of different lengths
KV_TOL = {"float64": 1e-12, "float32": 1e-5}

PROMPT, NEW = 12, 12  # 24 tokens in all: crosses tiny-gemma3's 16-token sliding window


@pytest.fixture(scope="module")
def pairs():
    return data.prefix_pairs(data.load_senses(), data.load_garden_paths())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_cached_greedy_equals_step_by_step_recompute(name, dtype, text_prompts):
    loaded = load_cached(name, dtype)
    prompts = text_prompts(loaded.tokenizer, 3, PROMPT)
    cached_tokens, cached_logits = greedy(loaded, prompts, NEW, use_cache=True)
    fresh_tokens, fresh_logits = greedy(loaded, prompts, NEW, use_cache=False)
    assert cached_logits.shape == (3, NEW, len(loaded.tokenizer))
    assert cached_logits.dtype == getattr(torch, dtype)
    torch.testing.assert_close(cached_logits, fresh_logits, rtol=0, atol=LOGIT_TOL[name, dtype])
    if dtype == "float64":
        assert torch.equal(cached_tokens, fresh_tokens)


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_one_pass_recompute_equals_per_step(name, text_prompts):
    loaded = load_cached(name, "float64")
    prompts = text_prompts(loaded.tokenizer, 2, PROMPT)
    tokens, step_logits = greedy(loaded, prompts, NEW, use_cache=False)
    one_pass = recompute_logits(loaded, torch.cat([prompts, tokens], -1), PROMPT)
    torch.testing.assert_close(one_pass, step_logits, rtol=0, atol=LOGIT_TOL[name, "float64"])


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_compare_decoding_reports_exactness_in_fp64(name, text_prompts):
    loaded = load_cached(name, "float64")
    prompts = text_prompts(loaded.tokenizer, 3, PROMPT)
    for mode in exactness.RECOMPUTE_MODES:
        r = exactness.compare_decoding(loaded, prompts, NEW, recompute=mode, batch_size=2)
        assert r["identical"] == 3 and r["first_divergence"] == [NEW] * 3
        assert r["max_logit_diff"] <= 1e-9
        assert r["argmax_agreement_pct"] == 100.0 and r["steps_compared"] == 3 * NEW
        assert r["argmax_agreement_all_steps_pct"] == 100.0 and r["recompute"] == mode


def test_compare_decoding_sees_a_real_difference(text_prompts):
    """The comparison is not blind: decoding a different model on one side shows up."""
    loaded = load_cached("tiny-llama", "float64")
    prompts = text_prompts(loaded.tokenizer, 2, PROMPT)
    tokens, logits = greedy(loaded, prompts, NEW, use_cache=True)
    shifted = recompute_logits(loaded, torch.cat([prompts[:, 1:], tokens], -1), PROMPT - 1)
    assert (logits - shifted).abs().max() > 1e-3


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_prefix_kv_do_not_depend_on_the_continuation(name, dtype, pairs):
    loaded = load_cached(name, dtype)
    r = exactness.compare_prefixes(loaded, pairs)
    assert r["n_prefixes"] == 18
    # sliding-window layers may have dropped the prefix of a long sequence; global layers never do
    layer_types = getattr(loaded.config, "layer_types", None) or ["full_attention"] * loaded.n_layers
    assert all(item["layers_compared"] >= layer_types.count("full_attention") for item in r["items"])
    assert r["max_diff_across_continuations"] <= KV_TOL[dtype]
    assert r["max_key_diff_alone_vs_inside"] <= KV_TOL[dtype]
    assert r["max_value_diff_alone_vs_inside"] <= KV_TOL[dtype]
    # bit-identity is usual but not guaranteed: sequences of different lengths may be summed in a
    # different order (tiny-neox gives 17/18 in fp64, like the article's Pythia); the count is
    # consistent with the measured residue
    assert (r["bit_identical"] == 18) == (r["max_diff_across_continuations"] == 0)


def test_sliding_window_layers_hold_only_their_window():
    """tiny-gemma3's local layers keep at most window - 1 past positions; global layers keep all."""
    loaded = load_cached("tiny-gemma3", "float64")
    ids = torch.arange(100, 140)[None]  # 40 tokens > 16-token window
    layers = prefill(loaded, ids)
    window = loaded.config.sliding_window
    for kind, layer in zip(loaded.config.layer_types, layers):
        held = layer.keys.shape[-2]
        assert held == (40 if kind == "full_attention" else min(40, window - 1))
        assert layer.first_position == 40 - held


def test_bert_keys_move_with_later_context(pairs):
    """The contrast: an encoder's keys for the same prefix tokens change with what follows, from the
    first layer whose input has seen the continuation (layer 1 on); layer 0's input is the
    context-free embedding, so its keys match."""
    loaded = load_cached("tiny-bert", "float64")
    tok, names = loaded.tokenizer, bert_key_modules(loaded.model)
    moved = []
    for pair in pairs[:4]:
        plen = len(tok(pair.prefix, add_special_tokens=False).input_ids) + 1  # + [CLS]
        keys = []
        for cont in pair.continuations:
            ids = tok(pair.prefix + cont, return_tensors="pt").input_ids
            with capture_outputs(loaded.model, names) as out, torch.inference_mode():
                loaded.model(input_ids=ids)
            keys.append([out[n][0, :plen] for n in names])  # (prefix, hidden) per layer
        torch.testing.assert_close(keys[0][0], keys[1][0], rtol=0, atol=1e-12)
        moved.append(min((a - b).abs().max().item() for a, b in zip(keys[0][1:], keys[1][1:])))
    assert min(moved) > 1e-4
    assert not any(m._forward_hooks for m in loaded.model.modules())  # hooks removed


def test_tokenize_pair_keeps_prefix_tokens(pairs):
    loaded = load_cached("tiny-llama", "float32")
    for pair in pairs:
        ids = exactness.tokenize_pair(loaded.tokenizer, pair)
        plen = ids.prefix.shape[-1]
        for cont in ids.continued:
            assert torch.equal(cont[:, :plen], ids.prefix) and cont.shape[-1] > plen


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-qwen2", "tiny-gemma3"])
def test_float64_models_normalise_in_float64(name):
    """transformers' RMSNorm computes in fp32; kvutils.load(dtype=float64) keeps it in fp64."""
    loaded = load_cached(name, "float64")
    norms = [m for m in loaded.model.modules() if type(m).__name__.endswith("RMSNorm")]
    assert norms
    x = torch.randn(2, 5, norms[0].weight.shape[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x = x * 1e3 + 1.0  # large values make fp32 rounding visible
    out = norms[0](x)
    weight = norms[0].weight + (1.0 if name == "tiny-gemma3" else 0.0)
    eps = getattr(norms[0], "variance_epsilon", getattr(norms[0], "eps", None))
    expected = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, expected, rtol=1e-14, atol=1e-14)
    assert (type(norms[0]).forward(norms[0], x) - expected).abs().max() > 1e-10  # the fp32 original


def test_float64_decoding_stays_exact_over_long_sequences(text_prompts):
    """64 new tokens after 32: with fp32 norms this residue grew to ~1e-6 on real models."""
    loaded = load_cached("tiny-qwen3", "float64")
    prompts = text_prompts(loaded.tokenizer, 2, 32)
    r = exactness.compare_decoding(loaded, prompts, 64, recompute="one_pass", batch_size=2)
    assert r["identical"] == 2 and r["max_logit_diff"] <= 1e-9


def test_worst_difference_is_nan_when_any_is():
    """Python's max() hides a NaN that is not first (max(0.0, nan) == 0.0), and `nan <= tol` is False
    only if the NaN reaches the check."""
    import math

    assert math.isnan(exactness.worst([0.0, float("nan"), 1.0])) and math.isnan(exactness.worst([float("nan")]))
    assert exactness.worst([0.0, 2.5, 1.0]) == 2.5


def test_nan_logits_fail_the_exactness_check(text_prompts):
    """A model that returns NaN logits must not pass as exact: the reported difference is NaN, and
    every tolerance check on it fails (before, the running max started at 0.0 and swallowed it)."""
    import math

    import kvutils

    loaded = kvutils.load("tiny-llama", "float64")  # its own copy: the head is broken below
    with torch.no_grad():
        loaded.model.get_output_embeddings().weight[7] = float("nan")
    prompts = text_prompts(loaded.tokenizer, 2, 8)
    r = exactness.compare_decoding(loaded, prompts, 4, recompute="one_pass", batch_size=2)
    assert math.isnan(r["max_logit_diff"]) and not r["max_logit_diff"] <= 1e-9


def test_prefix_comparison_reports_nan_states(pairs):
    import math

    import kvutils

    loaded = kvutils.load("tiny-llama", "float64")
    with torch.no_grad():
        loaded.model.model.layers[0].self_attn.k_proj.weight[0, 0] = float("nan")
    r = exactness.compare_prefixes(loaded, pairs[:2])
    assert r["bit_identical"] == 0  # NaN is not equal to itself: never "bit-identical"
    assert math.isnan(r["max_diff_across_continuations"]) and math.isnan(r["max_key_diff_alone_vs_inside"])


def test_layer_differences_keep_a_nan_in_the_values():
    """The per-layer K/V gap that chapter 5's identity checks read: a NaN only in the values must
    reach the result (max(key_gap, nan) in Python would have returned key_gap)."""
    import math

    from kvutils.lora.switching import layer_differences

    loaded = load_cached("tiny-llama", "float64")
    ids = torch.tensor([[1, 5, 9, 13, 17, 21]])
    a, b = (prefill_cache(loaded, ids) for _ in range(2))
    assert max(layer_differences(a, b, 6)) == 0.0
    with torch.inference_mode():
        b.layers[0].values[0, 0, 2, 0] = float("nan")
    assert math.isnan(layer_differences(a, b, 6)[0])


def prefill_cache(loaded, ids):
    from transformers import DynamicCache

    cache = DynamicCache(config=loaded.model.config)
    with torch.inference_mode():
        loaded.model(input_ids=ids, cache=cache, use_cache=True)
    return cache
