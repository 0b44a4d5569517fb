"""Teacher-forced scoring and the acceptance test: the fast path against the step-by-step
reference for every registered operation, the identities that must come out exact, the numbers
`accept` reports, its input checks and the command line.

fp32 on the tiny models, real English token ids. Tolerances: fast vs step 1e-4 on logits (the
issue's bound; measured <= 5e-5: rounding of the stored fp16/bf16 copies of entries whose fresh
values differ in the last bit between the two paths); an identity that only reorders the same
arithmetic (an operation that should change nothing, against the exact cache) 2e-5, as in
test_exactness.py.
"""
import dataclasses
import json
import math

import pytest
import torch
from conftest import CAUSAL_TINY, load_cached

from kvutils.cache import accept as acceptance
from kvutils.cache import registry
from kvutils.cache.fast_path import score_fast
from kvutils.cache.methods.cast import Cast
from kvutils.cache.methods.chunk_blend import ChunkBlend
from kvutils.cache.methods.chunk_reuse import ChunkReuse
from kvutils.cache.methods.exact import Exact
from kvutils.cache.methods.window import Window
from kvutils.cache.prefilled import exact_prefill
from kvutils.cache.scoring import score_step
from kvutils.core import data
from kvutils.models import loading as models

PREFILL, DECODE = 20, 12  # 33 tokens: crosses tiny-gemma3's 16-token window; the example windows (10) evict
FAST_STEP_TOL = 1e-4
EXACT_TOL = 2e-5


@pytest.fixture(scope="module")
def texts():
    return [d.text for d in data.load_corpus("pydoc")[:3]]


def _ids(loaded, text: str) -> torch.Tensor:
    return torch.tensor(loaded.tokenizer(text).input_ids[:PREFILL + DECODE + 1])


def _exact(loaded, ids):
    return score_fast(loaded, Exact(), ids, PREFILL, DECODE)


# --------------------------------------------------------------------------- the two paths


FAST_STEP_TOL_FP64 = 1e-9
WITH_FAST = [op for op in registry.example_ops() if op.has_fast_path]
STEP_ONLY = [op for op in registry.example_ops() if not op.has_fast_path]


@pytest.mark.parametrize("op", WITH_FAST, ids=lambda op: op.spec)
@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_fast_path_equals_step_path(name, op, texts):
    loaded = load_cached(name, "float32")
    ids = _ids(loaded, texts[0])
    fast = score_fast(loaded, op, ids, PREFILL, DECODE)
    step = score_step(loaded, op, ids, PREFILL, DECODE)
    assert fast.shape == (DECODE, len(loaded.tokenizer))
    assert (fast - step).abs().max() <= FAST_STEP_TOL
    if op != Exact():  # the comparison is not blind: every example operation changes the logits
        assert (fast - _exact(loaded, ids)).abs().max() > 1e-5


@pytest.mark.parametrize("op", [op for op in WITH_FAST if op.needs_views], ids=lambda op: op.spec)
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-gemma3"])
def test_press_fast_path_equals_step_path_in_fp64(name, op, texts):
    """In fp64 the per-head masked forward of all decoded tokens and the token-by-token one agree to
    rounding (the presses decide in fp64 too, so both paths keep the same entries)."""
    loaded = load_cached(name, "float64")
    ids = _ids(loaded, texts[0])
    stats_fast, stats_step = {}, {}
    fast = score_fast(loaded, op, ids, PREFILL, DECODE, stats=stats_fast)
    step = score_step(loaded, op, ids, PREFILL, DECODE, stats=stats_step)
    assert all(torch.equal(a, b) for a, b in zip(stats_fast["held"], stats_step["held"]))
    assert (fast - step).abs().max() <= FAST_STEP_TOL_FP64


@pytest.mark.parametrize("op", STEP_ONLY, ids=lambda op: op.spec)
def test_step_only_methods_refuse_the_fast_path_and_change_the_logits(op, texts):
    loaded = load_cached("tiny-qwen3", "float32")  # full attention only: the transformers cache accepts it
    ids = _ids(loaded, texts[0])
    with pytest.raises(ValueError, match="only the step path"):
        score_fast(loaded, op, ids, PREFILL, DECODE)
    step = score_step(loaded, op, ids, PREFILL, DECODE)
    assert (step - _exact(loaded, ids)).abs().max() > 1e-4


@pytest.mark.parametrize("spec", ["h2o:compression_ratio=0.5", "tova:compression_ratio=0.5"])
def test_decode_time_policies_hold_their_budget_while_decoding(spec, texts):
    """After every decoded token each KV head holds exactly (1 - ratio) x prefill entries."""
    loaded = load_cached("tiny-llama", "float32")
    ids = _ids(loaded, texts[1])
    op = registry.parse_op(spec)
    pre = exact_prefill(loaded, ids[None, :PREFILL], views=True)
    states = [op.start(v) for v in pre.views]
    budget = int(PREFILL * 0.5)
    assert all((s["held"].sum(-1) == budget).all() for s in states)
    g = torch.Generator().manual_seed(0)
    for n in range(PREFILL, PREFILL + 5):
        for s in states:
            heads = loaded.config.num_attention_heads
            w = torch.rand(1, heads, 1, n + 1, generator=g).softmax(-1)
            op.step(s, w)
            assert s["held"].shape[-1] == n + 1 and (s["held"].sum(-1) == budget).all()
    if op.name == "h2o":  # the recent half of the budget is the most recent tokens
        recent = budget // 2
        assert all(s["held"][:, -recent:].all() for s in states)
    else:  # TOVA: one kept set per layer
        assert all((s["held"] == s["held"][:1]).all() for s in states)


def test_tova_evicts_the_entry_the_current_query_attends_least(texts):
    loaded = load_cached("tiny-llama", "float32")
    ids = _ids(loaded, texts[1])
    op = registry.parse_op("tova:compression_ratio=0.5")
    state = op.start(exact_prefill(loaded, ids[None, :PREFILL], views=True).views[0])
    before = state["held"][0].clone()
    w = torch.full((1, loaded.config.num_attention_heads, 1, PREFILL + 1), 1.0)
    victim = int(before.nonzero()[3])
    w[..., victim] = 0.01
    op.step(state, w / w.sum(-1, keepdim=True))
    assert not state["held"][0, victim] and state["held"][0, -1]


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_exact_scoring_equals_a_plain_forward(name, texts):
    loaded = load_cached(name, "float32")
    ids = _ids(loaded, texts[1])
    with torch.inference_mode():
        plain = loaded.model(input_ids=ids[None, :PREFILL + DECODE]).logits[0, PREFILL:]
    torch.testing.assert_close(_exact(loaded, ids), plain, rtol=0, atol=EXACT_TOL)
    torch.testing.assert_close(score_step(loaded, Exact(), ids, PREFILL, DECODE), plain, rtol=0, atol=EXACT_TOL)


def test_window_keeps_sinks_and_the_most_recent_tokens():
    kept = Window(10, 2).keeps(torch.arange(30), torch.tensor([25]))[0].nonzero().squeeze(1)
    assert kept[kept < 25].tolist() == [0, 1, *range(17, 25)]  # 10 entries before the query at 25


@pytest.mark.parametrize("reindex", [False, True])
@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_window_covering_the_sequence_is_exact(name, reindex, texts):
    loaded = load_cached(name, "float32")
    ids = _ids(loaded, texts[0])
    op = Window(PREFILL + DECODE - 1, 2, reindex)
    with pytest.warns(UserWarning, match="evicts nothing"):
        op.check_lengths(PREFILL, DECODE)
    exact = _exact(loaded, ids)
    torch.testing.assert_close(score_fast(loaded, op, ids, PREFILL, DECODE), exact, rtol=0, atol=EXACT_TOL)
    torch.testing.assert_close(score_step(loaded, op, ids, PREFILL, DECODE), exact, rtol=0, atol=EXACT_TOL)


@pytest.mark.parametrize("name", CAUSAL_TINY)
def test_chunk_blend_recomputing_everything_is_exact(name, texts):
    loaded = load_cached(name, "float32")
    ids = _ids(loaded, texts[2])
    exact = _exact(loaded, ids)
    torch.testing.assert_close(score_fast(loaded, ChunkBlend(1.0, 8), ids, PREFILL, DECODE), exact,
                               rtol=0, atol=EXACT_TOL)
    partial = score_fast(loaded, ChunkBlend(0.5, 8), ids, PREFILL, DECODE)
    reused = score_fast(loaded, ChunkReuse("reindexed", 8), ids, PREFILL, DECODE)
    assert (partial - exact).abs().max() > 1e-4 and (partial - reused).abs().max() > 1e-4


# --------------------------------------------------------------------------- what accept reports


def test_accept_exact_gives_zero_kl_full_agreement_and_the_plain_perplexity(texts):
    loaded = load_cached("tiny-qwen3", "float32")
    r = acceptance.accept(loaded, "exact", texts, prefill=PREFILL, decode=DECODE, progress=False)
    assert r["mean_kl"] == 0.0 and r["top1_agreement_pct"] == 100.0
    nll = []
    for text in texts:
        ids = _ids(loaded, text)
        with torch.inference_mode():
            logits = loaded.model(input_ids=ids[None, :-1]).logits[0, PREFILL:]
        nll.append(torch.nn.functional.cross_entropy(logits, ids[PREFILL + 1:], reduction="none"))
    plain = math.exp(torch.cat(nll).mean().item())
    assert r["perplexity"] == pytest.approx(plain, rel=1e-5)
    assert r["exact_perplexity"] == r["perplexity"]
    assert [d["id"] for d in r["per_document"]] == ["doc0", "doc1", "doc2"]


def test_accept_numbers_are_those_of_the_logits(texts):
    loaded = load_cached("tiny-llama", "float32")
    op = "quantize_naive:bits=2"
    r = acceptance.accept(loaded, op, texts[:2], prefill=PREFILL, decode=DECODE, progress=False)
    kl, agree, nll = [], [], []
    for text in texts[:2]:
        ids = _ids(loaded, text)
        exact, approx = _exact(loaded, ids), score_fast(loaded, registry.parse_op(op), ids, PREFILL, DECODE)
        p, q = torch.log_softmax(exact.double(), -1), torch.log_softmax(approx.double(), -1)
        kl.append((p.exp() * (p - q)).sum(-1))
        agree.append(exact.argmax(-1) == approx.argmax(-1))
        nll.append(-q[torch.arange(DECODE), ids[PREFILL + 1:]])
    assert r["mean_kl"] == pytest.approx(torch.cat(kl).mean().item(), rel=1e-9)
    assert r["mean_kl"] > 1e-5  # random tiny models predict nearly uniformly: small KLs
    assert r["top1_agreement_pct"] == pytest.approx(100 * torch.cat(agree).double().mean().item())
    assert r["perplexity"] == pytest.approx(math.exp(torch.cat(nll).mean().item()), rel=1e-9)
    assert r["per_document"][1]["mean_kl"] == pytest.approx(kl[1].mean().item(), rel=1e-9)
    assert r["cache_bytes"] < r["exact_cache_bytes"]


def test_a_reference_held_for_many_operations_gives_each_the_numbers_computed_alone():
    """`Reference` computes the exact side once per document; each operation compared with it gets
    bit for bit what the exact and modified logits give from scratch, across blocks of steps."""
    g = torch.Generator().manual_seed(0)
    exact = torch.randn(37, 500, generator=g)  # (steps, vocab): 37 steps, two blocks of 32 and one of 5
    targets = torch.randint(0, 500, (37,), generator=g)
    held = acceptance.Reference(exact, targets)
    for scale in (0.0, 0.01, 1.0):
        approx = exact + scale * torch.randn(37, 500, generator=g)
        p, q = torch.log_softmax(exact.double(), -1), torch.log_softmax(approx.double(), -1)
        got = held.compare(approx)
        assert torch.allclose(got["kl"], (p.exp() * (p - q)).sum(-1), rtol=1e-12, atol=1e-15)
        assert torch.equal(got["nll"], -q[torch.arange(37), targets])
        assert torch.equal(got["nll_exact"], -p[torch.arange(37), targets])
        assert torch.equal(got["agree"], exact.argmax(-1) == approx.argmax(-1))
        alone = acceptance.compare(exact, approx, targets)
        assert all(torch.equal(got[k], alone[k]) for k in alone)
    assert torch.equal(held.compare(exact)["kl"], torch.zeros(37, dtype=torch.float64))


def test_cast_to_the_models_own_dtype_is_exact(texts):
    loaded = load_cached("tiny-gemma3", "float32")
    r = acceptance.accept(loaded, Cast("float32"), texts[:2], prefill=PREFILL, decode=DECODE, progress=False)
    assert r["mean_kl"] < 1e-9 and r["top1_agreement_pct"] == 100.0
    assert r["perplexity"] == pytest.approx(r["exact_perplexity"], rel=1e-6)


# --------------------------------------------------------------------------- bad input, before any model loads


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the inputs were checked")
    monkeypatch.setattr(models, "load", refuse)


@pytest.mark.parametrize("kwargs, message", [
    (dict(ops=["evict_all"]), "unknown operation 'evict_all'; registered: exact, cast"),
    (dict(ops=["quantize_naive:bits=3"]), "bits must be one of 2, 4, 8"),
    (dict(ops=["window:size=8,sinks=8"]), "sinks must be smaller than size=8"),
    (dict(ops=["chunk_blend:recompute_fraction=2"]), "recompute_fraction must be a number between 0 and 1"),
    (dict(ops=["chunk_reuse:chunk=20"]), "chunk must be smaller than prefill=20"),
    (dict(ops=["snapkv:compression_ratio=1"]), "compression_ratio must be a number with 0 <= compression_ratio < 1"),
    (dict(ops=["snapkv:window=20"]), "window must be smaller than prefill=20"),
    (dict(ops=["h2o:recent=2"]), "recent must be a number between 0 and 1"),
    (dict(ops=["hf_quantized:backend=int3"]), "backend must be one of fp8, quanto, hqq"),
    (dict(prefill=0), "prefill must be >= 1"),
    (dict(path="slow"), "path: 'slow' is not allowed"),
    (dict(dtype="float16"), "dtype: unsupported dtype 'float16'"),
    (dict(n_docs=5), "n_docs=5 asked for, but only 3 of 3 documents have 33 tokens"),
    (dict(model="tiny-bert"), "tiny-bert is an encoder model"),
    (dict(docs=["too short", "also short"]), "shorter than prefill + decode + 1 = 33 tokens: doc0 ("),
])
def test_bad_input_is_rejected_before_any_model_loads(kwargs, message, texts, no_model_load):
    args = dict(model="tiny-llama", ops=["exact"], docs=texts, prefill=PREFILL, decode=DECODE, progress=False)
    args.update(kwargs)
    with pytest.raises(ValueError) as err:
        acceptance.accept_many(**args)
    assert message in str(err.value)


def test_a_window_that_evicts_nothing_warns_but_runs(texts):
    loaded = load_cached("tiny-llama", "float32")
    with pytest.warns(UserWarning, match="evicts nothing"):
        r = acceptance.accept(loaded, "window:size=64,sinks=4", texts[:1], prefill=PREFILL, decode=DECODE,
                              progress=False)
    assert r["mean_kl"] < 1e-9 and r["top1_agreement_pct"] == 100.0


def test_short_documents_are_named_or_skipped(texts):
    loaded = load_cached("tiny-llama", "float32")
    docs = ["A few words only.", *texts[:2]]
    with pytest.raises(ValueError, match=r"doc0 \(\d+ tokens\)"):
        acceptance.accept(loaded, "exact", docs, prefill=PREFILL, decode=DECODE, progress=False)
    r = acceptance.accept(loaded, "exact", docs, prefill=PREFILL, decode=DECODE, skip_short=True, progress=False)
    assert r["documents"] == ["doc1", "doc2"] and [s["id"] for s in r["skipped_short"]] == ["doc0"]


# --------------------------------------------------------------------------- command line


@pytest.mark.parametrize("spec, message", [
    ("nope", "unknown operation 'nope'; registered: exact, cast, quantize_naive"),
    ("window:size=4,sinks=4", "sinks must be smaller than size=4"),
    ("quantize_kivi:bits=two", "bits='two' is not a valid int"),
])
def test_cli_rejects_bad_ops_when_parsing(spec, message, capsys, no_model_load):
    with pytest.raises(SystemExit) as exit_:
        acceptance.main(["--model", "tiny-llama", "--op", spec, "--docs", "pydoc"])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_help_lists_every_operation_with_its_fields(capsys):
    with pytest.raises(SystemExit):
        acceptance.main(["--help"])
    text = capsys.readouterr().out
    for name, cls in registry.OPS.items():
        line = next(line for line in text.splitlines()
                    if line.strip().startswith(f"{name} (") or line.strip().startswith(f"{name}:"))
        assert all(f"{f.name}=" in line for f in dataclasses.fields(cls)), line


def test_presses_at_half_hold_half_the_bytes(texts):
    loaded = load_cached("tiny-llama", "float32")
    specs = ["exact", "snapkv:compression_ratio=0.5,window=4", "tova:compression_ratio=0.5", "h2o:compression_ratio=0.5",
             "pyramidkv:compression_ratio=0.5,window=2,beta=2", "adakv:compression_ratio=0.5,window=4"]
    run = acceptance.accept_many(loaded, specs, texts[:2], prefill=PREFILL, decode=DECODE, progress=False)
    exact = run["ops"]["exact"]["cache_bytes"]
    assert [r["cache_bytes"] for r in run["ops"].values()] == [exact] + [exact / 2] * 5
    assert run["ops"]["tova:compression_ratio=0.5"]["path"] == "step"
    assert run["ops"]["snapkv:compression_ratio=0.5,window=4,kernel=5"]["path"] == "fast"
    # the guide's time column: per document, the exact decode pass and each one-document op's scoring;
    # the token-by-token ops (decoded in groups) keep no per-document time, and the guide shows none
    exact_decode = run["exact_decode_seconds_per_document"]
    assert len(exact_decode) == 2 and all(t > 0 for t in exact_decode)
    snap = run["ops"]["snapkv:compression_ratio=0.5,window=4,kernel=5"]
    assert len(snap["seconds_per_document"]) == 2 and all(t > 0 for t in snap["seconds_per_document"])
    assert "seconds_per_document" not in run["ops"]["tova:compression_ratio=0.5"]
    from kvutils.report.guide import time_ratios
    ratios = time_ratios(snap, run)
    assert ratios == pytest.approx([a / b for a, b in zip(snap["seconds_per_document"], exact_decode)])
    assert time_ratios(run["ops"]["tova:compression_ratio=0.5"], run) is None


def test_a_cache_that_refuses_the_model_is_named_not_skipped(texts, capsys):
    loaded = load_cached("tiny-gemma3", "float32")
    run = acceptance.accept_many(loaded, ["exact", "hf_quantized:backend=fp8"], texts[:1], prefill=PREFILL,
                                 decode=DECODE, progress=False)
    assert list(run["ops"]) == ["exact"]
    assert "sliding-attention" in run["refused"]["hf_quantized:backend=fp8"]
    assert "hf_quantized:backend=fp8 not scored" in capsys.readouterr().err
    assert "refused: transformers' QuantizedCache refuses" in acceptance.table(run)


def test_cli_end_to_end_on_a_folder_of_text_files(tmp_path, texts, capsys):
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in zip("abc", texts):
        (folder / f"{name}.txt").write_text(text)
    out = tmp_path / "results" / "accept.json"
    ops = ["exact", "quantize_naive:bits=2", "window:size=10,sinks=2"]
    argv = ["--model", "tiny-llama", "--docs", str(folder), "--prefill", str(PREFILL), "--decode", str(DECODE),
            "--n-docs", "2", "--out", str(out)]
    for op in ops:
        argv += ["--op", op]
    assert acceptance.main(argv) == 0
    printed = capsys.readouterr().out
    assert "exact perplexity" in printed and all(op in printed for op in ops[1:])
    run = json.loads(out.read_text())
    assert run["documents"] == ["a.txt", "b.txt"] and run["model"]["name"] == "tiny-llama"
    assert list(run["ops"]) == ["exact", "quantize_naive:bits=2", "window:size=10,sinks=2,reindex=false"]
    assert run["ops"]["exact"]["mean_kl"] == 0.0 and run["ops"]["exact"]["top1_agreement_pct"] == 100.0
    assert run["ops"]["quantize_naive:bits=2"]["mean_kl"] > 1e-5
    library = acceptance.accept(load_cached("tiny-llama", "float32"), "window:size=10,sinks=2",
                                [f"{t}" for t in texts[:2]], prefill=PREFILL, decode=DECODE, progress=False)
    assert run["ops"]["window:size=10,sinks=2,reindex=false"]["mean_kl"] == pytest.approx(library["mean_kl"], rel=1e-6)
    assert "packages" in run and not list(out.parent.glob(".*.tmp"))


def test_jsonl_documents(tmp_path, texts):
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps({"text": t}) for t in texts[:2]) + "\n")
    r = acceptance.accept(load_cached("tiny-neox", "float32"), "cast:dtype=bfloat16", str(path),
                          prefill=PREFILL, decode=DECODE, progress=False)
    assert r["documents"] == ["docs.jsonl:1", "docs.jsonl:2"] and 0 < r["mean_kl"] < 1e-3


# --------------------------------------------------------------------------- beyond one device


AUTO_OPS = ["exact", "snapkv:compression_ratio=0.5,window=4", "quantize_kivi:bits=2,group=4,residual=8",
            "tova:compression_ratio=0.5"]


def test_a_model_spread_over_cpu_and_disk_gives_the_same_numbers(tmp_path, texts):
    """device="auto" (accelerate's device_map="auto"), forced to split: with max_memory below the
    model's size part of it goes to disk and is read back per forward. Exact, a press, a quantiser
    and a decode-time policy give bit-identical numbers to the unsplit model (a wrong input device,
    a hook that skips the offloaded head, or a cache living on the wrong device would change or
    break them)."""
    whole = load_cached("tiny-llama", "float32")
    size = sum(p.numel() * p.element_size() for p in whole.model.parameters())
    split = models.load("tiny-llama", device="auto", max_memory={"cpu": size}, offload_folder=tmp_path / "offload")
    assert {"cpu", "disk"} <= set(split.model.hf_device_map.values()), split.model.hf_device_map
    assert split.device == torch.device("cpu")
    kwargs = dict(prefill=PREFILL, decode=DECODE, progress=False)
    a = acceptance.accept_many(whole, AUTO_OPS, texts[:2], **kwargs)
    b = acceptance.accept_many(split, AUTO_OPS, texts[:2], **kwargs)
    assert a["exact_perplexity"] == b["exact_perplexity"]
    for spec, r in a["ops"].items():
        assert (b["ops"][spec]["mean_kl"], b["ops"][spec]["top1_agreement_pct"], b["ops"][spec]["cache_bytes"]) == \
            (r["mean_kl"], r["top1_agreement_pct"], r["cache_bytes"]), spec
    assert a["ops"]["quantize_kivi:bits=2,group=4,residual=8"]["mean_kl"] > 0  # the comparison is not of zeros only


def test_max_memory_needs_device_auto():
    with pytest.raises(ValueError, match="max_memory / offload_folder: only with device='auto'"):
        models.load("tiny-llama", device="cpu", max_memory={"cpu": 1})


def test_cli_device_auto(tmp_path, texts):
    """`--device auto` is accepted and, on a machine with one device, gives the CPU's numbers."""
    out = {}
    for device in ("cpu", "auto"):
        out[device] = tmp_path / f"{device}.json"
        argv = ["--model", "tiny-llama", "--docs", "pydoc", "--prefill", str(PREFILL), "--decode", str(DECODE),
                "--n-docs", "1", "--skip-short", "--device", device, "--out", str(out[device]),
                "--op", "quantize_kivi:bits=2,group=4,residual=8"]
        assert acceptance.main(argv) == 0
    runs = {d: json.loads(p.read_text())["ops"] for d, p in out.items()}
    assert [r["mean_kl"] for r in runs["auto"].values()] == [r["mean_kl"] for r in runs["cpu"].values()]


def test_the_table_shows_the_exact_row_bytes_against_exact_and_what_n_allows(texts):
    """The printed table starts with the exact cache (its bytes the 1.00 of the "× smaller"
    column), gives each operation's perplexity change with its interval over documents, and says
    when n is too small for any verdict."""
    from kvutils.cache.accept_report import perplexity_against_exact
    from kvutils.core import compare

    loaded = load_cached("tiny-llama", "float32")
    run = acceptance.accept_many(loaded, ["quantize_naive:bits=4"], texts[:3], prefill=PREFILL, decode=DECODE,
                                 progress=False)
    printed = acceptance.table(run)
    exact_row = next(line for line in printed.splitlines() if line.startswith("exact (the reference)"))
    assert f"{run['exact_cache_bytes'] / 1024:.1f}" in exact_row and " 1.00 " in exact_row
    op_row = next(line for line in printed.splitlines() if line.startswith("quantize_naive:bits=4"))
    smaller = run["exact_cache_bytes"] / run["ops"]["quantize_naive:bits=4"]["cache_bytes"]
    test = perplexity_against_exact(run, "quantize_naive:bits=4")
    assert f"{smaller:.2f}" in op_row and f"{test.effect:+.3g} [" in op_row
    assert test.n == 3 and not compare.can_separate(3)
    assert "at n = 3 no operation can be told from exact" in printed


def test_the_helps_examples_are_accepted_as_typed():
    """Each example at the end of --help (but the one on a reader's own directory) parses and passes
    every check made before a model loads."""
    import shlex

    from kvutils.cache import accept_args

    typed = accept_args.EXAMPLES.replace("\\\n", " ")  # a command continued with a backslash, as a shell reads it
    examples = [line.strip() for line in typed.splitlines()
                if line.strip().startswith("python -m kvutils.accept") and "./my-model" not in line]
    assert len(examples) == 2
    for example in examples:
        _, args = accept_args.parse(shlex.split(example)[3:])
        assert args.ops
