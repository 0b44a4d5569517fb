"""Cache operations: naming and validation, the quantisers, key re-rotation, chunk reuse, bytes.

fp32 throughout. Tolerances: re-rotated keys 1e-5 (transformers computes rotary angles in fp32,
so a rotation by d and back, or a chunk moved by re-rotation instead of recomputed, agrees to a
few ulps of these keys' O(1) scale); everything else is exact arithmetic or a stated bound.
"""
import pytest
import torch

from conftest import CAUSAL_TINY, load_cached
from kvutils import cache, engines
from kvutils.cache import (ARTICLE_OPS, EXTRA_OPS, OPS, Cast, ChunkBlend, ChunkReuse, Exact, QuantizeKivi,
                           QuantizeNaive, Window, parse_op, parse_ops)
from kvutils.rotary import rotary_cos_sin, rotate_keys
from kvutils.teacher import kv_forward

KEY_TOL = 1e-5


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(10, 5000, (1, n), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- registry and parsing


def test_registry_holds_every_operation_of_the_issue():
    assert list(OPS) == ["exact", "cast", "quantize_naive", "quantize_kivi", "window", "chunk_reuse", "chunk_blend"]
    assert all(cls.examples and all(parse_op(s).name == name for s in cls.examples) for name, cls in OPS.items())
    assert len(ARTICLE_OPS) == 12 and len(parse_ops(ARTICLE_OPS + EXTRA_OPS)) == 21


@pytest.mark.parametrize("spec, expected", [
    ("exact", Exact()),
    ("cast:dtype=bfloat16", Cast("bfloat16")),
    ("quantize_naive:bits=4", QuantizeNaive(4)),
    ("quantize_kivi:bits=2,residual=64", QuantizeKivi(bits=2, group=32, residual=64)),
    ("window:size=128,sinks=4", Window(128, 4, False)),
    (" window:size=64, sinks=0, reindex=true ", Window(64, 0, True)),
    ("chunk_reuse:positions=original", ChunkReuse("original", 128)),
    ("chunk_blend:recompute_fraction=0.15", ChunkBlend(0.15, 128)),
])
def test_parse_op_converts_by_field_type(spec, expected):
    op = parse_op(spec)
    assert op == expected
    assert all(type(getattr(op, k)) is type(getattr(expected, k)) for k in op.__dataclass_fields__)
    assert parse_op(op.spec) == op  # the printed spec parses back to the same op


@pytest.mark.parametrize("spec, words", [
    ("quantize_naive:bits=3", ["bits", "2, 4, 8"]),
    ("quantize_kivi:bits=16", ["bits", "2, 4, 8"]),
    ("quantize_kivi:group=32,residual=48", ["residual", "multiple of group=32"]),
    ("window:size=4,sinks=4", ["sinks", "smaller than size=4"]),
    ("window:size=0,sinks=0", ["size", ">= 1"]),
    ("window:size=8,sinks=-1", ["sinks", ">= 0"]),
    ("window:size=abc", ["size", "not a valid int"]),
    ("window:size=8,reindex=maybe", ["reindex", "not a valid bool"]),
    ("chunk_blend:recompute_fraction=1.5", ["recompute_fraction", "between 0 and 1"]),
    ("chunk_blend:recompute_fraction=-0.1", ["recompute_fraction", "between 0 and 1"]),
    ("chunk_reuse:positions=shifted", ["positions", "'original' or 'reindexed'"]),
    ("cast:dtype=int8", ["dtype", "float16, bfloat16"]),
    ("window:width=8", ["width", "keys: reindex, sinks, size"]),
    ("evict_all", ["unknown operation 'evict_all'", "exact, cast, quantize_naive, quantize_kivi, window"]),
])
def test_bad_op_specs_name_the_field_and_what_is_allowed(spec, words):
    with pytest.raises(ValueError) as err:
        parse_op(spec)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_length_checks_warn_or_fail_before_any_model():
    with pytest.warns(UserWarning, match="evicts nothing"):
        Window(511, 4).check_lengths(256, 256)
    Window(128, 4).check_lengths(256, 256)  # evicts: no warning (pytest turns none into nothing)
    with pytest.raises(ValueError, match="chunk=256 is not allowed; chunk must be smaller than prefill=256"):
        ChunkReuse("reindexed", 256).check_lengths(256, 64)
    with pytest.raises(ValueError, match="named twice"):
        parse_ops(["exact", "exact"])


# --------------------------------------------------------------------------- quantisers


def test_naive_quantisation_error_shrinks_with_bits():
    x = torch.randn(2, 3, 64, 32, generator=torch.Generator().manual_seed(0))
    errors = {b: (QuantizeNaive(b).store(x, x, torch.arange(64))[0] - x).abs().mean().item() for b in (2, 4, 8)}
    assert errors[8] < errors[4] / 8 and errors[4] < errors[2] / 2
    # round-to-nearest: at most half a step, the step being max |x| / 127 per token and head
    step = x.abs().amax(-1, keepdim=True) / 127
    assert ((QuantizeNaive(8).store(x, x, torch.arange(64))[0] - x).abs() <= step / 2 + 1e-7).all()


def test_kivi_beats_naive_on_keys_with_an_outlier_channel():
    """Known answer: with one channel at ~50 and the rest within ±3, a per-token 4-bit step is
    ~50/7, so every ordinary channel rounds to 0 and its error is exactly |x|; KIVI's per-channel
    step leaves the ordinary channels an error of at most half their own step."""
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(1, 2, 64, 16, generator=g).clamp(-3, 3)
    keys[..., 3] = 50.0 + torch.rand(1, 2, 64, generator=g)
    slots = torch.arange(64)
    naive = QuantizeNaive(4).store(keys, keys, slots)[0]
    kivi = QuantizeKivi(4, group=32, residual=64).store(keys, keys, slots)[0]
    ordinary = torch.arange(16) != 3
    assert (naive[..., ordinary] == 0).all()
    naive_error = (naive - keys)[..., ordinary].abs().mean().item()
    assert naive_error == pytest.approx(keys[..., ordinary].abs().mean().item(), rel=1e-6)
    grouped = keys.unflatten(-2, (2, 32))
    half_step = ((grouped.amax(-2) - grouped.amin(-2)) / 15 / 2).repeat_interleave(32, dim=-2)
    assert ((kivi - keys).abs() <= half_step + 1e-5).all()
    kivi_error = (kivi - keys)[..., ordinary].abs().mean().item()
    assert kivi_error < naive_error / 5


def test_kivi_stores_whole_residual_blocks():
    op = QuantizeKivi(2, group=4, residual=8)
    assert op.stored_after(torch.arange(20)).tolist() == [7] * 8 + [15] * 8 + [23] * 4
    x = torch.randn(1, 1, 8, 4, generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match="whole groups"):
        op.store(x, x, torch.arange(2, 10))


def test_cast_to_the_models_own_dtype_changes_nothing():
    x = torch.randn(1, 2, 8, 16, generator=torch.Generator().manual_seed(2))
    k, v = Cast("float32").store(x, x * 2, torch.arange(8))
    assert torch.equal(k, x) and torch.equal(v, x * 2)
    assert (Cast("bfloat16").store(x, x, torch.arange(8))[0] - x).abs().max() > 1e-4


# --------------------------------------------------------------------------- rotation


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_rerotation_there_and_back_returns_the_keys(name):
    loaded = load_cached(name, "float32")
    kv = kv_forward(loaded, _ids(24))
    rotary_dim = rotary_cos_sin(loaded, 0, kv[0][0], torch.arange(2))[0].shape[-1]
    head_dim = kv[0][0].shape[-1]
    assert rotary_dim == (head_dim // 4 if name == "tiny-neox" else head_dim)  # NeoX rotary_pct=0.25
    for layer, (keys, _) in enumerate(kv):
        moved = rotate_keys(loaded, layer, keys, 37)
        assert (moved - keys)[..., :rotary_dim].abs().max() > 1e-2
        assert torch.equal(moved[..., rotary_dim:], keys[..., rotary_dim:])  # the unrotated channels
        back = rotate_keys(loaded, layer, moved, -37)
        torch.testing.assert_close(back, keys, rtol=0, atol=KEY_TOL)
        per_key = rotate_keys(loaded, layer, keys, torch.arange(24))  # one shift per key
        torch.testing.assert_close(per_key[..., 5, :], rotate_keys(loaded, layer, keys, 5)[..., 5, :],
                                   rtol=0, atol=KEY_TOL)


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_reindexed_chunk_equals_the_chunk_computed_alone_at_its_new_positions(name):
    loaded = load_cached(name, "float32")
    ids, chunk = _ids(20, seed=3), 8
    context = 20 - chunk
    moved = ChunkReuse("reindexed", chunk).prefill(loaded, ids)
    at_new_positions = kv_forward(loaded, ids[:, context:], positions=torch.arange(context, 20))
    exact = kv_forward(loaded, ids)
    stale = ChunkReuse("original", chunk).prefill(loaded, ids)
    for (k, v), (k_new, v_new), (k_exact, _), (k_stale, _) in zip(moved, at_new_positions, exact, stale):
        torch.testing.assert_close(k[..., context:, :], k_new, rtol=0, atol=KEY_TOL)
        torch.testing.assert_close(v[..., context:, :], v_new, rtol=0, atol=KEY_TOL)
        # the context keeps its exact cache (up to the length-dependent rounding of chapter 1)
        torch.testing.assert_close(k[..., :context, :], k_exact[..., :context, :], rtol=0, atol=KEY_TOL)
        assert (k_stale[..., context:, :] - k_new).abs().max() > 1e-2  # stale positions differ
    # past layer 0 the chunk misses its context: the cache is not the exact one
    assert (moved[-1][1][..., context:, :] - exact[-1][1][..., context:, :]).abs().max() > 1e-3


def test_blend_with_nothing_recomputed_is_plain_reuse():
    loaded = load_cached("tiny-llama", "float32")
    ids = _ids(20, seed=4)
    blended = ChunkBlend(0.0, 8).prefill(loaded, ids)
    reused = ChunkReuse("reindexed", 8).prefill(loaded, ids)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(blended, reused))


# --------------------------------------------------------------------------- bytes held


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_exact_cache_bytes_match_a_real_cache(name):
    """The formula counts what transformers' own cache holds (Gemma 3's local layers: window - 1)."""
    loaded = load_cached(name, "float32")
    prefill = 24
    real = sum(2 * layer.keys.numel() * layer.keys.element_size() for layer in engines.prefill(loaded, _ids(prefill)))
    assert cache.cache_bytes(loaded.config, Exact(), prefill, loaded.dtype) == real


def test_cache_bytes_follow_each_operation():
    config = load_cached("tiny-llama", "float32").config  # 2 layers, 2 KV heads, head_dim 16
    exact = cache.cache_bytes(config, Exact(), 64, torch.float32)
    assert exact == 2 * 2 * 64 * 2 * 16 * 4
    assert cache.cache_bytes(config, Cast("float16"), 64, torch.float32) == exact / 2
    assert cache.cache_bytes(config, Window(16, 4), 64, torch.float32) == exact / 4
    naive4 = cache.cache_bytes(config, QuantizeNaive(4), 64, torch.float32)
    assert naive4 == 2 * 2 * 64 * 2 * (16 * 4 / 8 + 2)  # 4 bits a channel + an fp16 scale per token and head
    # KIVI keeps the unfinished residual block (here 64 - 48 = 16 tokens) in full precision
    kivi = cache.cache_bytes(config, QuantizeKivi(4, group=16, residual=48), 64, torch.float32)
    assert naive4 < kivi < exact
