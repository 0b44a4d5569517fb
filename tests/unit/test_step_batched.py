"""The step path with a run's documents decoded together (`teacher.score_step_many`): each
document's logits and stats are those it gets alone, for a press, the decode-time policies and
transformers' fp8 cache object, on tiny random models of every architecture family.

The reference is written out here as the step path was before batching: one document, one token
per forward, per-head visibility as 2-D masks, `op.step` per layer, a plain QuantizedCache. fp64
throughout: batched and single-document forwards then agree to rounding (tolerance 1e-9, as the
fast-vs-step fp64 test in test_accept.py), so a policy that evicted differently, a mask applied to
the wrong document or one fp8 scale shared by all documents shows up as a logit difference."""
import pytest
import torch
from conftest import CAUSAL_TINY, load_cached
from transformers.cache_utils import Cache, DynamicLayer

from kvutils.cache import accept as acceptance
from kvutils.cache import scoring as teacher
from kvutils.cache.fast_path import score_fast
from kvutils.cache.forward import attention_masks
from kvutils.cache.methods.exact import Exact
from kvutils.cache.prefilled import exact_prefill, kv_forward
from kvutils.cache.registry import parse_op
from kvutils.cache.sizes import cache_object_bytes
from kvutils.cache.step_batched import StepStart
from kvutils.core import data
from kvutils.models import attention

PREFILL, DECODE, DOCS = 20, 12, 3  # crosses tiny-gemma3's 16-token window; the example budgets evict
TOL = 1e-9
MASKED = ["snapkv:compression_ratio=0.5,window=4,kernel=3", "h2o:compression_ratio=0.5,recent=0.5",
          "tova:compression_ratio=0.5"]
FP8 = "hf_quantized:backend=fp8"


@pytest.fixture(scope="module")
def texts():
    return [d.text for d in data.load_corpus("pydoc")[:DOCS]]


def _batch(loaded, texts) -> torch.Tensor:
    return torch.stack([torch.tensor(loaded.tokenizer(t).input_ids[:PREFILL + DECODE + 1]) for t in texts])


def _layer(keys, values) -> DynamicLayer:
    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


def _reference_masked(loaded, op, ids):
    """One document (seq,), as the step path was before batching: returns (logits, held after the prefill)."""
    pre = exact_prefill(loaded, ids[None, :PREFILL], views=True)
    policy = hasattr(op, "step")
    states = [op.start(v) for v in pre.views] if policy else None
    held = [s["held"] for s in states] if policy else op.decide(pre.views)
    start = [h.clone() for h in held]
    layers = Cache(layers=[_layer(k, v) for k, v in pre.kv])
    logits = []
    for n in range(PREFILL, PREFILL + DECODE):
        seen = {}
        masks = {i: torch.cat([h, torch.ones(h.shape[0], 1, dtype=torch.bool)], -1) for i, h in enumerate(held)}
        visible = attention_masks(loaded, torch.ones(1, n + 1, dtype=torch.bool), torch.tensor([n]),
                                          torch.arange(n + 1))
        record = (lambda layer, q, k, v, weights, scale, seen=seen: seen.__setitem__(layer, weights)) if policy else None
        with attention.session(loaded, masks=masks, record=record):
            out = loaded.model(input_ids=ids[None, n:n + 1], position_ids=torch.tensor([[n]]), attention_mask=visible,
                               cache=layers, use_cache=True)
        logits.append(out.logits[0, -1])
        held = [op.step(s, seen[i]())["held"] for i, s in enumerate(states)] if policy else list(masks.values())
    return torch.stack(logits), start


def _reference_cache_object(loaded, op, ids):
    """One document with its own QuantizedCache: (logits, bytes held after the prefill)."""
    kv = kv_forward(loaded, ids[None, :PREFILL])
    qc = op.make_cache(loaded.model.config)
    for i, (k, v) in enumerate(kv):
        qc.update(k, v, i)
    held = cache_object_bytes(qc)
    logits = [loaded.model(input_ids=ids[None, n:n + 1], position_ids=torch.tensor([[n]]), cache=qc,
                           use_cache=True).logits[0, -1] for n in range(PREFILL, PREFILL + DECODE)]
    return torch.stack(logits), held


@pytest.mark.parametrize("spec", MASKED)
@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_batched_presses_and_policies_equal_each_document_alone(name, spec, texts):
    loaded = load_cached(name, "float64")
    op = parse_op(spec)
    ids = _batch(loaded, texts)
    stats = [{} for _ in range(DOCS)]
    batched = teacher.score_step_many(loaded, op, ids, PREFILL, DECODE, stats=stats)
    assert batched.shape == (DOCS, DECODE, len(loaded.tokenizer))
    for d in range(DOCS):
        alone, held = _reference_masked(loaded, op, ids[d])
        assert (batched[d] - alone).abs().max() <= TOL, f"document {d}"
        assert all(torch.equal(a, b) for a, b in zip(stats[d]["held"], held))
        assert (teacher.score_step(loaded, op, ids[d], PREFILL, DECODE) - alone).abs().max() <= TOL
    # not blind: the documents differ, and the operation changes the logits
    assert (batched[0] - batched[1]).abs().max() > 1e-3
    exact = score_fast(loaded, Exact(), ids[0], PREFILL, DECODE)
    assert (batched[0] - exact).abs().max() > 1e-5


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-qwen2", "tiny-neox"])  # QuantizedCache refuses sliding layers
def test_batched_fp8_cache_object_keeps_each_documents_scale(name, texts):
    loaded = load_cached(name, "float64")
    op = parse_op(FP8)
    ids = _batch(loaded, texts)
    stats = [{} for _ in range(DOCS)]
    batched = teacher.score_step_many(loaded, op, ids, PREFILL, DECODE, stats=stats)
    for d in range(DOCS):
        alone, held = _reference_cache_object(loaded, op, ids[d])
        assert (batched[d] - alone).abs().max() <= TOL, f"document {d}"
        assert stats[d]["cache_bytes"] == held
    exact = score_fast(loaded, Exact(), ids[2], PREFILL, DECODE)
    assert (batched[2] - exact).abs().max() > 1e-5  # fp8 rounding shows


def test_one_fp8_scale_per_document_not_per_batch():
    """The joined cache keeps each document's own scale: a batch whose documents' entries differ in
    size by 1000x would quantise the small one to zeros under a shared scale."""
    loaded = load_cached("tiny-llama", "float64")
    op = parse_op(FP8)
    kv = kv_forward(loaded, torch.arange(10, 10 + PREFILL)[None])
    small = [(k / 1000, v / 1000) for k, v in kv]
    starts = []
    for layers in (kv, small):
        qc = op.make_cache(loaded.model.config)
        for i, (k, v) in enumerate(layers):
            qc.update(k, v, i)
        starts.append(StepStart(layers, cache=qc))
    ids = torch.arange(10, 10 + PREFILL + 2).repeat(2, 1)
    both = teacher.score_step_many(loaded, op, ids, PREFILL, 2, starts)
    alone = _reference_small(loaded, op, small, ids[1])
    assert (both[1] - alone).abs().max() <= TOL


def _reference_small(loaded, op, kv, ids):
    qc = op.make_cache(loaded.model.config)
    for i, (k, v) in enumerate(kv):
        qc.update(k, v, i)
    return torch.stack([loaded.model(input_ids=ids[None, n:n + 1], position_ids=torch.tensor([[n]]), cache=qc,
                                     use_cache=True).logits[0, -1] for n in range(PREFILL, PREFILL + 2)])


@pytest.mark.parametrize("spec", ["window:size=10,sinks=2,reindex=true", "quantize_kivi:bits=2,group=4,residual=8"])
def test_operations_deciding_by_position_keep_their_own_step_path(spec, texts):
    loaded = load_cached("tiny-llama", "float64")
    op = parse_op(spec)
    ids = _batch(loaded, texts[:2])
    many = teacher.score_step_many(loaded, op, ids, PREFILL, DECODE)
    for d in range(2):  # against the fast path: re-rotation takes transformers' fp32 rotary angles
        fast = score_fast(loaded, op, ids[d], PREFILL, DECODE)
        assert (many[d] - fast).abs().max() <= 1e-7


def test_accept_many_numbers_per_document_are_those_of_each_document_alone(texts):
    """accept_many decodes its step-path operations' documents together; every document's numbers
    and held bytes are what a run on that document alone reports."""
    loaded = load_cached("tiny-qwen3", "float64")
    specs = ["exact", MASKED[0], MASKED[1], MASKED[2], FP8, "window:size=10,sinks=2"]
    run = acceptance.accept_many(loaded, specs, texts, prefill=PREFILL, decode=DECODE, progress=False)
    for d, text in enumerate(texts):
        alone = acceptance.accept_many(loaded, specs, [text], prefill=PREFILL, decode=DECODE, progress=False)
        for spec, numbers in alone["ops"].items():
            together = run["ops"][spec]["per_document"][d]
            for key in ("mean_kl", "top1_agreement_pct", "perplexity"):
                assert together[key] == pytest.approx(numbers["per_document"][0][key], rel=1e-9, abs=1e-12), (spec, key)
    for spec in specs[1:5]:
        assert run["ops"][spec]["path"] == "step" or spec == MASKED[0]
        assert run["ops"][spec]["mean_kl"] > 0
