"""Several presses scored in one batched forward (kvutils.cache.fast_batched) give each press what
the fast path gives it alone, on every model family; every registered press is batched, and
nothing that stores, re-rotates or decides per token is."""
import pytest
import torch

from kvutils.cache import registry
from kvutils.cache.base import PRESS
from kvutils.cache.fast_batched import PRESS_BATCH, batchable, score_presses
from kvutils.cache.fast_path import score_fast
from kvutils.cache.prefilled import exact_prefill
from tests.conftest import load_cached

FAMILIES = ("tiny-llama", "tiny-gemma3", "tiny-neox", "tiny-qwen3")
PRESSES = [op for op in registry.example_ops() if op.kind == PRESS]
# fp32 logits of O(1): a batched matmul may sum in another order than one row alone
TOLERANCE = {"tiny-llama": 2e-6, "tiny-gemma3": 2e-6, "tiny-neox": 2e-6, "tiny-qwen3": 2e-6}


def test_every_registered_press_and_nothing_else_is_batched():
    ops = registry.example_ops()
    assert PRESSES and all(batchable(op) for op in PRESSES)
    assert not any(batchable(op) for op in ops if op.kind != PRESS)


@pytest.mark.parametrize("family", FAMILIES)
def test_each_row_is_what_the_press_gets_alone(family):
    loaded = load_cached(family, "float32")
    torch.manual_seed(0)
    ids = torch.randint(0, 200, (90,))  # (seq,)
    prefill, decode = 70, 20
    pre = exact_prefill(loaded, ids[None, :prefill], views=True)
    # more presses than one forward takes, so the chunks are joined in order
    ops = (PRESSES * (PRESS_BATCH // len(PRESSES) + 2))[:PRESS_BATCH + 3]
    kept = [op.decide(pre.views) for op in ops]
    got = score_presses(loaded, ids, prefill, decode, pre, kept, last=6)
    assert got.shape[:2] == (len(ops), 6)
    for row, (op, k) in enumerate(zip(ops, kept)):
        alone = score_fast(loaded, op, ids, prefill, decode, pre, decided=k, last=6)  # (6, vocab)
        assert (got[row] - alone).abs().max() <= TOLERANCE[family], op.spec


def test_a_row_reads_only_what_its_press_kept():
    """Two presses that keep disjoint halves of the prefill: each row is scored on its own half
    (the rows differ, and each equals its press alone, checked above)."""
    loaded = load_cached("tiny-llama", "float32")
    ids = torch.arange(40) % 50 + 3
    pre = exact_prefill(loaded, ids[None, :30], views=True)
    kv_heads = pre.kv[0][0].shape[1]
    even = torch.zeros(kv_heads, 30, dtype=torch.bool)
    even[:, ::2] = True
    kept = [[even] * len(pre.kv), [~even] * len(pre.kv)]
    got = score_presses(loaded, ids, 30, 10, pre, kept)
    assert got.shape[:2] == (2, 10) and (got[0] - got[1]).abs().max() > 1e-3
