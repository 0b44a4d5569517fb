"""Cache operations: naming and validation, the quantisers, key re-rotation, chunk reuse, bytes.

fp32 throughout. Tolerances: re-rotated keys 1e-5 (transformers computes rotary angles in fp32,
so a rotation by d and back, or a chunk moved by re-rotation instead of recomputed, agrees to a
few ulps of these keys' O(1) scale); everything else is exact arithmetic or a stated bound.
"""
import pytest
import torch
from conftest import CAUSAL_TINY, load_cached

from kvutils.cache import sizes
from kvutils.cache.base import quantize_asymmetric
from kvutils.cache.methods.adakv import AdaKVPress
from kvutils.cache.methods.cast import Cast
from kvutils.cache.methods.chunk_blend import ChunkBlend
from kvutils.cache.methods.chunk_reuse import ChunkReuse
from kvutils.cache.methods.exact import Exact
from kvutils.cache.methods.expected_attention import ExpectedAttentionPress, rotate, rotation_matrix
from kvutils.cache.methods.knorm import KnormPress
from kvutils.cache.methods.press import top_mask
from kvutils.cache.methods.pyramidkv import PyramidKVPress
from kvutils.cache.methods.quantize_kivi import QuantizeKivi
from kvutils.cache.methods.quantize_naive import QuantizeNaive
from kvutils.cache.methods.snapkv import SnapKVPress
from kvutils.cache.methods.window import Window
from kvutils.cache.prefilled import exact_prefill, kv_forward
from kvutils.cache.registry import ARTICLE_OPS, EXTRA_OPS, OPS, parse_op, parse_ops
from kvutils.models import greedy as engines
from kvutils.models.rotary import rotary_cos_sin, rotate_keys

KEY_TOL = 1e-5


def _ids(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(10, 5000, (1, n), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- registry and parsing


@pytest.mark.parametrize("name", list(OPS))
def test_every_registered_operation_parses_its_examples(name):
    """(Its order and its lists, as the book was built with them: tests/unit/test_registry.py.)"""
    assert OPS[name].examples and all(parse_op(s).name == name for s in OPS[name].examples)


def test_the_article_rows_and_ours_parse():
    assert len(ARTICLE_OPS) == 12 and len(parse_ops(ARTICLE_OPS + EXTRA_OPS)) == 19


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
    ("snapkv:compression_ratio=1.0", ["compression_ratio", "0 <= compression_ratio < 1"]),
    ("knorm:compression_ratio=-0.1", ["compression_ratio", "0 <= compression_ratio < 1"]),
    ("snapkv:kernel=4", ["kernel", "odd"]),
    ("pyramidkv:beta=0", ["beta", ">= 1"]),
    ("adakv:safeguard=1.5", ["safeguard", "between 0 and 1"]),
    ("expected_attention:future=0", ["future", ">= 1"]),
    ("tova:budget=3", ["budget", "keys: compression_ratio"]),
    ("hf_quantized:backend=int4", ["backend", "fp8, quanto, hqq"]),
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
    kivi = QuantizeKivi(4, group=32, residual=64).store_keys(keys, slots)
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


def _kivi_reference(x: torch.Tensor, group: int, bits: int, dim: int) -> torch.Tensor:
    """jy-yuan/KIVI quant/new_pack.py, quant_and_pack_kcache (dim=-2: groups of `group` tokens per
    channel) and quant_and_pack_vcache (dim=-1: groups of `group` channels per token), then the
    matching unpack_and_dequant: mn, mx per group; scale = (mx - mn) / (2^bits - 1);
    q = round(clamp((x - mn) / scale, 0, 2^bits - 1)); x' = q * scale + mn."""
    max_int = 2 ** bits - 1
    if dim == -2:
        B, nh, T, D = x.shape
        data = x.reshape(B, nh, T // group, group, D)
        mn, mx = data.min(-2, keepdim=True)[0], data.max(-2, keepdim=True)[0]
    else:
        data = x.reshape(*x.shape[:-1], x.shape[-1] // group, group)
        mn, mx = data.min(-1, keepdim=True)[0], data.max(-1, keepdim=True)[0]
    scale = (mx - mn) / max_int
    q = ((data - mn) / scale).clamp(0, max_int).round()
    return (q * scale + mn).reshape(x.shape)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_kivi_quantiser_matches_the_reference_formulas(bits):
    """Keys per channel over groups of `group` tokens, values per token over groups of `group`
    channels, on fixed fp64 tensors: equal to the reference's formulas to rounding."""
    g = torch.Generator().manual_seed(5)
    keys = torch.randn(1, 2, 16, 8, generator=g, dtype=torch.float64) * torch.linspace(0.5, 8, 8, dtype=torch.float64)
    values = torch.randn(1, 2, 16, 8, generator=g, dtype=torch.float64)
    op = QuantizeKivi(bits, group=4, residual=8)
    slots = torch.arange(16)
    torch.testing.assert_close(op.store_keys(keys, slots), _kivi_reference(keys, 4, bits, -2), rtol=0, atol=1e-12)
    torch.testing.assert_close(op.store_values(values, slots), _kivi_reference(values, 4, bits, -1), rtol=0, atol=1e-12)
    # the groups are real: a per-token (not per-channel-group) value quantiser would differ
    assert (op.store_values(values, slots) - quantize_asymmetric(values, bits, dim=-1)).abs().max() > 1e-3


def _kivi_full_precision(prefill: int, decode: int, residual: int):
    """Replays models/llama_kivi.py's bookkeeping: for each decode query n, which earlier slots
    are read in full precision, for keys (key_states_full) and values (value_states_full)."""
    def split_keys(n):
        return n - n % residual if n % residual else n  # quantised prefix length of the prefill
    key_quant = split_keys(prefill) if prefill >= residual else 0
    key_full = list(range(key_quant, prefill))
    value_full = list(range(max(0, prefill - residual), prefill)) if prefill > residual else list(range(prefill))
    seen = []
    for n in range(prefill, prefill + decode):
        key_full.append(n)
        value_full.append(n)
        seen.append((n, set(key_full) - {n}, set(value_full) - {n}))  # what the query at n reads fresh
        if len(key_full) == residual:
            key_full = []
        if len(value_full) > residual:
            value_full = value_full[1:]
    return seen


@pytest.mark.parametrize("prefill", [5, 8, 13, 16])
def test_kivi_residuals_follow_the_reference(prefill):
    """Keys: a full-precision block of `residual` tokens quantised whole once complete; values: a
    sliding window of the last `residual` tokens (the query at n also reads n - residual fresh)."""
    op = QuantizeKivi(2, group=4, residual=8)
    for n, keys_fresh, values_fresh in _kivi_full_precision(prefill, 20, 8):
        slots = torch.arange(n)
        assert set((op.stored_after(slots) >= n).nonzero().squeeze(1).tolist()) == keys_fresh, n
        assert set((op.values_stored_after(slots) >= n).nonzero().squeeze(1).tolist()) == values_fresh, n


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
    assert sizes.cache_bytes(loaded.config, Exact(), prefill, loaded.dtype) == real


def test_cache_bytes_follow_each_operation():
    config = load_cached("tiny-llama", "float32").config  # 2 layers, 2 KV heads, head_dim 16
    exact = sizes.cache_bytes(config, Exact(), 64, torch.float32)
    assert exact == 2 * 2 * 64 * 2 * 16 * 4
    assert sizes.cache_bytes(config, Cast("float16"), 64, torch.float32) == exact / 2
    assert sizes.cache_bytes(config, Window(16, 4), 64, torch.float32) == exact / 4
    naive4 = sizes.cache_bytes(config, QuantizeNaive(4), 64, torch.float32)
    assert naive4 == 2 * 2 * 64 * 2 * (16 * 4 / 8 + 2)  # 4 bits a channel + an fp16 scale per token and head
    # KIVI keeps the unfinished residual block (here 64 - 48 = 16 tokens) in full precision
    kivi = sizes.cache_bytes(config, QuantizeKivi(4, group=16, residual=48), 64, torch.float32)
    assert naive4 < kivi < exact
    # KIVI at 64 tokens, residual 48: keys 0-47 stored (one block), values 0-15 stored (the last 48 fresh)
    per_head_layer = 2 * 2  # layers x KV heads
    keys = 48 * 16 * 4 / 8 + 3 * 16 * 2 * 2 + 16 * 16 * 4
    values = 16 * (16 * 4 / 8 + 1 * 2 * 2) + 48 * 16 * 4
    assert kivi == per_head_layer * (keys + values)


# --------------------------------------------------------------------------- presses


@pytest.fixture(scope="module")
def views():
    loaded = load_cached("tiny-qwen3", "float32")  # 4 query heads on 2 KV heads: the group means matter
    return exact_prefill(loaded, _ids(40, seed=7), views=True).views


@pytest.mark.parametrize("ratio, kept", [(0.25, 30), (0.5, 20), (0.75, 10), (0.99, 1)])
def test_presses_keep_kvpress_budget_per_head(views, ratio, kept):
    for name in ("random", "knorm", "snapkv", "expected_attention"):
        op = parse_op(f"{name}:compression_ratio={ratio}" + (",window=4" if name == "snapkv" else ""))
        for mask in op.decide(views):
            assert mask.shape == (2, 40) and (mask.sum(-1) == kept).all(), name


def test_knorm_keeps_the_smallest_keys(views):
    mask = KnormPress(0.5).decide(views)[0]
    norms = views[0].keys[0].norm(dim=-1)
    for h in range(2):
        assert norms[h][mask[h]].max() <= norms[h][~mask[h]].min()


def test_snapkv_keeps_its_window_and_scores_by_the_windows_attention(views):
    op = SnapKVPress(0.5, window=6, kernel=1)
    v = views[1]
    mask = op.decide(views)[1]
    assert mask[:, -6:].all()
    # by hand: the last 6 queries' attention to each earlier key, mean over queries, then the group
    w = (v.queries[0, :, -6:] @ v.keys[0].repeat_interleave(2, 0).transpose(-1, -2) * v.scale)
    w = w.masked_fill(torch.ones(6, 40, dtype=torch.bool).tril(34).logical_not(), float("-inf")).softmax(-1)
    score = w[..., :-6].mean(1).view(2, 2, -1).mean(1)
    expected = score.topk(20 - 6, -1).indices
    assert all(set(mask[h, :-6].nonzero().squeeze(1).tolist()) == set(expected[h].tolist()) for h in range(2))


def test_pyramidkv_budgets_fall_with_depth_and_keep_the_mean(views):
    masks = PyramidKVPress(0.5, window=2, beta=2).decide(views)
    counts = [int(m[0].sum()) for m in masks]
    assert counts[0] > counts[-1] and counts == sorted(counts, reverse=True)
    assert sum(counts) == pytest.approx(20 * len(counts), abs=len(counts))


def test_adakv_moves_budget_between_heads_with_a_safeguard(views):
    masks = AdaKVPress(0.5, window=4, safeguard=0.5).decide(views)
    for m in masks:
        assert int(m.sum()) == 2 * 20 and (m.sum(-1) >= 10).all()
    assert any((m.sum(-1) != 20).any() for m in masks)  # not the uniform split


def test_expected_attention_keeps_its_sinks_and_uses_future_positions(views):
    near = ExpectedAttentionPress(0.5, future=1, sinks=3).decide(views)
    far = ExpectedAttentionPress(0.5, future=512, sinks=3).decide(views)
    assert all(m[:, :3].all() for m in near + far)
    assert any(not torch.equal(a, b) for a, b in zip(near, far))


def _expected_attention_float64(press, view):
    """Expected Attention's score written out in float64, one query head at a time: the reference
    the float32 score is held to."""
    P, d = view.keys.shape[-2], view.keys.shape[-1]
    cos, sin = (x[0].double() for x in view.rotary(torch.arange(P)))
    r = cos.shape[-1]
    fcos, fsin = view.rotary(torch.arange(P, P + press.future))
    rot = rotation_matrix(fcos[0].double().mean(0), fsin[0].double().mean(0), d)
    rows = []
    for h, q in enumerate(view.queries[0].double()):  # (P, d)
        pre = torch.cat([rotate(q[:, :r], cos, -sin), q[:, r:]], -1)[press.sinks:]
        mu, cov = pre.mean(0), torch.cov(pre.T, correction=0)
        keys = view.keys[0, h // view.groups, press.sinks:].double()  # (n, d)
        s = view.scale
        rows.append(s * keys @ (rot @ mu) + s * s * torch.einsum("nd,de,ne->n", keys, rot @ cov @ rot.T, keys) / 2)
    scores = view.per_kv_head(torch.stack(rows).softmax(-1)) * view.values[0, :, press.sinks:].double().norm(dim=-1)
    return torch.nn.functional.pad(scores, (press.sinks, 0), value=scores.max().item())


def test_expected_attention_in_float32_scores_as_float64_does(views):
    """The press scores in float32 (2.2x faster than float64 on Gemma's 2,040-token prefill): each layer's
    scores are float64's to 1e-5 of their largest, and the entries it keeps at 50 % are float64's."""
    press = ExpectedAttentionPress(0.5, future=64, sinks=2)
    for view in views:
        got, reference = press.score(view), _expected_attention_float64(press, view)
        torch.testing.assert_close(got, reference, rtol=0, atol=1e-5 * reference.abs().max().item())
    reference_kept = [top_mask(_expected_attention_float64(press, v), press.budget(v)) for v in views]
    assert all(torch.equal(a, b) for a, b in zip(press.decide(views), reference_kept))


def test_rotation_matrix_is_the_rotary_rotation():
    d = 8
    cos, sin = torch.rand(4, dtype=torch.float64), torch.rand(4, dtype=torch.float64)
    x = torch.randn(3, d, dtype=torch.float64)
    rotated = torch.cat([rotate(x[:, :4], cos, sin), x[:, 4:]], -1)
    torch.testing.assert_close(x @ rotation_matrix(cos, sin, d).T, rotated)


# --------------------------------------------------------------------------- the operation kinds


def test_no_code_outside_the_methods_guesses_an_operations_kind():
    """The scorer dispatches on `op.kind` (kvutils.cache.base), never on which attributes an op has."""
    import re

    from kvutils.core.paths import REPO_ROOT

    guess = re.compile(r"\b(hasattr|getattr)\(\s*(self\.)?op\b")
    methods = REPO_ROOT / "kvutils" / "cache" / "methods"
    offenders = [f"{path.relative_to(REPO_ROOT)}:{i}" for path in sorted((REPO_ROOT / "kvutils").rglob("*.py"))
                 if methods not in path.parents
                 for i, line in enumerate(path.read_text().splitlines(), 1) if guess.search(line)]
    assert offenders == []


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_method_states_the_kind_it_implements(name):
    """A method that forgets its kind (or states the wrong one) fails here, not in a scorer."""
    from kvutils.cache import base

    cls = OPS[name]
    assert cls.kind in base.KINDS
    own = {attr for attr in ("decide", "start", "step_many", "make_cache") if hasattr(cls, attr)}
    expected = {base.STORAGE: set(), base.PRESS: {"decide"}, base.POLICY: {"start", "step_many"},
                base.CACHE_OBJECT: {"make_cache"}}[cls.kind]
    assert expected <= own and not own - expected - ({"decide"} if cls.kind == base.POLICY else set()), (cls.kind, own)
    assert cls.needs_views == (cls.kind in (base.PRESS, base.POLICY))
    assert cls.has_fast_path == (cls.kind in (base.STORAGE, base.PRESS))
