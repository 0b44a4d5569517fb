"""kvutils.models.attention: a per-KV-head visibility combined with the model's own mask, and the
attention weights a method reads, each against a dense reference written out in full."""
import pytest
import torch
from conftest import CAUSAL_TINY, load_cached

from kvutils.cache.prefilled import kv_forward
from kvutils.models import attention
from kvutils.models.attention import combined_mask

Q, K, KV_HEADS, GROUPS = 5, 9, 3, 2
MIN = torch.finfo(torch.float32).min
TOL_WEIGHTS = 1e-6  # the weights' softmax is fp32


def _causal(q: int, k: int) -> torch.Tensor:
    return torch.ones(q, k, dtype=torch.bool).tril(k - q)[None, None]  # (1, 1, q, k)


def _per_head(extra: torch.Tensor) -> torch.Tensor:
    """The reference: (batch, kv_heads, q or 1, k) -> (batch, heads, q or 1, k), each KV head's
    column repeated for its query group, in repeat_kv's order."""
    return extra.repeat_interleave(GROUPS, dim=1)


@pytest.mark.parametrize("shape", [(KV_HEADS, K), (KV_HEADS, Q, K), (4, KV_HEADS, 1, K), (4, KV_HEADS, Q, K)])
def test_bool_mask_is_the_models_and_each_heads(shape):
    g = torch.Generator().manual_seed(sum(shape))
    extra = torch.rand(shape, generator=g) > 0.4
    got = combined_mask(_causal(Q, K), extra, GROUPS, Q, K, torch.float32, "cpu")
    as4d = extra[None, :, None, :] if extra.dim() == 2 else extra.reshape((1,) * (4 - extra.dim()) + tuple(extra.shape))
    want = _causal(Q, K) & _per_head(as4d)
    assert got.dtype == torch.bool
    assert got.shape == (as4d.shape[0], KV_HEADS * GROUPS, Q, K)
    assert torch.equal(got, want.expand_as(got))


def test_additive_mask_keeps_the_models_values_and_hides_with_the_minimum():
    g = torch.Generator().manual_seed(1)
    base = torch.zeros(1, 1, Q, K).masked_fill(~_causal(Q, K), MIN)
    base[..., 0] = -3.0  # a value of the model's own, kept where the key is shown
    extra = torch.rand(2, KV_HEADS, 1, K, generator=g) > 0.5
    got = combined_mask(base, extra, GROUPS, Q, K, torch.float32, "cpu")
    shown = _per_head(extra).expand(2, -1, Q, -1)
    assert got.shape == (2, KV_HEADS * GROUPS, Q, K)
    assert torch.equal(got[shown], base.expand_as(got)[shown])
    assert bool((got[~shown] == MIN).all())


def test_per_head_model_mask_is_grouped_in_repeat_kv_order():
    """A model mask that already differs per query head keeps each head's own row."""
    g = torch.Generator().manual_seed(2)
    base = torch.rand(1, KV_HEADS * GROUPS, Q, K, generator=g) > 0.3
    extra = torch.rand(KV_HEADS, K, generator=g) > 0.3
    got = combined_mask(base, extra, GROUPS, Q, K, torch.float32, "cpu")
    assert torch.equal(got, base & _per_head(extra[None, :, None, :]))


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_recorded_weights_are_each_query_heads_softmax_over_its_kv_heads_keys(name):
    """The weights a method reads (`weights(rows)`) against softmax(q k^T * scale) under the causal
    mask, each query head reading its own KV head (repeat_kv's order), on a prefill shorter than any
    sliding window. The model runs in fp64; the weights' softmax is taken in fp32 (as kvpress takes
    it), hence the fp32 tolerance."""
    loaded = load_cached(name, "float64")
    ids = torch.arange(3, 15)[None]  # (1, 12)
    seen = {}
    with attention.session(loaded, record=lambda layer, q, k, v, w, s: seen.__setitem__(layer, (q, k, w, s))):
        kv_forward(loaded, ids)
    groups_seen = set()
    for layer, (q, k, weights, scale) in seen.items():
        groups = q.shape[1] // k.shape[1]
        groups_seen.add(groups)
        keys = k.repeat_interleave(groups, dim=1)  # (1, heads, seq, head_dim)
        scores = (q @ keys.transpose(-1, -2)) * scale
        n = q.shape[2]
        want = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        assert (weights() - want).abs().max() <= TOL_WEIGHTS, f"layer {layer}"
        assert (weights(slice(n - 3, n)) - want[:, :, n - 3:]).abs().max() <= TOL_WEIGHTS, f"layer {layer}, last rows"
    assert max(groups_seen) > 1 or name == "tiny-neox"  # the grouping is exercised wherever the family has it
