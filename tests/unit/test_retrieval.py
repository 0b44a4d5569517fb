"""Long-range retrieval (kvutils.core.haystack, kvutils.cache.retrieval, chapter 4's analysis): the
needle lies where the builder says, "correct" is greedy decoding's exact match, a method that keeps
every entry retrieves exactly as the exact cache (a tie by construction), a window that has evicted
the needle is scored on a cache without it, the shared prefill and the layer-by-layer decisions give
what each method computes alone, and the gate and the rank agreement are computed, not assumed."""
import dataclasses
import json
import random

import matplotlib.text
import numpy as np
import pytest
import torch

from kvutils.book import chapters
from kvutils.cache import retrieval
from kvutils.cache.fast_path import score_fast
from kvutils.cache.methods.exact import Exact
from kvutils.cache.prefilled import Prefilled, exact_prefill
from kvutils.cache.registry import parse_op
from kvutils.cache.scoring import score_step
from kvutils.core import haystack
from kvutils.models import layers
from kvutils.models.greedy import greedy
from kvutils.studies.cache_approximations import retrieval as study
from kvutils.studies.cache_approximations import study as approx_study
from kvutils.studies.parameters import Chapter4Parameters
from tests.conftest import load_cached

FAMILIES = ("tiny-llama", "tiny-gemma3", "tiny-neox", "tiny-qwen3")
QUICK = dict(chapters.QUICK["04_cache_approximations"], corpus="pydoc", device="cpu")


def _prompts(loaded, hay="pydoc", contexts=(160,), depths=(0.1, 0.5, 0.9), n=3, **kw):
    return haystack.build_prompts(loaded.tokenizer, hay, list(contexts), list(depths), n, **kw)


@pytest.mark.parametrize("hay", ["pydoc", "filler"])
def test_the_needle_is_where_the_builder_says(hay):
    loaded = load_cached("tiny-llama", "float32")
    tok = loaded.tokenizer
    prompts = _prompts(loaded, hay, contexts=(256, 512), n=6)
    assert prompts == _prompts(loaded, hay, contexts=(256, 512), n=6)  # same seed, same prompts
    for p in prompts:
        assert len(p.ids) == p.context
        needle = tok.decode(list(p.ids[p.needle[0]:p.needle[1]]))
        assert p.key in needle and needle.strip().startswith("The pass key" if hay == "filler" else "One of the special")
        assert tok.decode(list(p.ids[p.answer:])).strip() == p.key
        assert p.key not in tok.decode(list(p.ids[p.question:p.answer]))
        # at the boundary nearest the depth: within half a piece of it
        start = len(tok("", add_special_tokens=True).input_ids)
        fill = p.question - start - (p.needle[1] - p.needle[0])
        assert abs(p.needle[0] - start - p.depth * fill) <= haystack.MAX_PIECE / 2, (p.needle, p.depth, fill)
    assert [p.depth for p in prompts[:6]] == [0.1, 0.5, 0.9] * 2
    assert len({p.key for p in prompts}) == len(prompts)


def test_bad_depths_contexts_and_needles_are_refused_by_name():
    loaded = load_cached("tiny-llama", "float32")
    for bad in ("0,0.5", "0.5,1", "1.5", "a", "0.5,0.5"):
        with pytest.raises(ValueError, match="depths"):
            haystack.check_depths(bad)
    with pytest.raises(ValueError, match="context"):
        _prompts(loaded, contexts=(64,))
    with pytest.raises(ValueError, match="needle"):
        _prompts(loaded, needle="haystack")
    with pytest.raises(ValueError, match="distractors"):
        _prompts(loaded, "filler", needle="passkey", distractors=2)
    with pytest.raises(ValueError, match="retrieval_depths"):
        approx_study.plan(Chapter4Parameters(**{**QUICK, "retrieval_depths": "0.1,1.0"}))
    with pytest.raises(ValueError, match="retrieval_models.*not in models"):
        approx_study.plan(Chapter4Parameters(**{**QUICK, "retrieval_models": "smollm2-135m"}))


def test_distractors_are_other_words_and_keys():
    loaded = load_cached("tiny-llama", "float32")
    p = _prompts(loaded, contexts=(512,), n=1, distractors=3)[0]
    text = loaded.tokenizer.decode(list(p.ids[:p.question]))
    assert text.count("special magic numbers") == 4 and text.count(p.key) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_correct_is_greedy_decodings_exact_match(family):
    """Teacher-forced argmax at every answer token == greedy decoding writes the answer."""
    loaded = load_cached(family, "float32")
    p = _prompts(loaded, n=1)[0]
    written, _ = greedy(loaded, torch.tensor([p.ids[:p.answer]]), p.answer_length)
    greedy_prompt = dataclasses.replace(p, ids=p.ids[:p.answer] + tuple(written[0].tolist()))
    other = dataclasses.replace(p, ids=greedy_prompt.ids[:-1] + ((greedy_prompt.ids[-1] + 1) % 50,))
    run = retrieval.score_retrieval(loaded, [], [greedy_prompt, other], progress=False)
    assert [r["correct"] for r in run["exact"]] == [True, False]
    assert run["exact"][0]["key_logprob"] > run["exact"][1]["key_logprob"]


@pytest.mark.parametrize("family", FAMILIES)
def test_keeping_every_entry_retrieves_exactly_as_the_exact_cache(family):
    """A tie by construction: a window larger than the prompt evicts nothing, so in both regimes it
    answers every prompt as the exact cache does (the agnostic prefill is the first positions of the
    shared one: equal up to the fp32 summation-order residue)."""
    loaded = load_cached(family, "float32")
    prompts = _prompts(loaded)
    run = retrieval.score_retrieval(loaded, ["window:size=100000,sinks=4", "snapkv:compression_ratio=0,window=8"],
                                    prompts, progress=False)
    for got in run["ops"].values():
        for regime in retrieval.REGIMES:
            for r, e in zip(got[regime]["per_prompt"], run["exact"]):
                assert r["correct"] == e["correct"]
                assert r["key_logprob"] == pytest.approx(e["key_logprob"], abs=1e-4)


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gemma3"])
def test_a_window_that_evicted_the_needle_never_reads_it(family):
    """Checked by position: the window's keep rule drops every needle slot for every answer query,
    and changing the needle's cached keys and values changes nothing the window computes (while it
    changes what the exact cache computes)."""
    loaded = load_cached(family, "float32")
    p = _prompts(loaded, depths=(0.5,), n=1)[0]
    op = parse_op("window:size=24,sinks=2")
    ids = torch.tensor(p.ids)
    slots = torch.arange(p.needle[0], p.needle[1])
    assert slots.min() >= op.sinks and not op.keeps(slots, torch.arange(p.answer - 1, p.context)).any()
    for regime in retrieval.REGIMES:
        P = retrieval.prefill_length(p, regime)
        D = p.context - 1 - P
        pre = exact_prefill(loaded, ids[None, :P])
        spoiled = Prefilled([(k.clone(), v.clone()) for k, v in pre.kv])
        for k, v in spoiled.kv:
            k[..., slots, :] += 3.0
            v[..., slots, :] -= 3.0
        assert torch.equal(score_fast(loaded, op, ids, P, D, pre), score_fast(loaded, op, ids, P, D, spoiled))
        assert not torch.equal(score_fast(loaded, Exact(), ids, P, D, pre), score_fast(loaded, Exact(), ids, P, D, spoiled))


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gemma3"])
def test_a_window_that_excludes_the_needle_is_labelled_a_loss_by_construction(family):
    """By position: a window ending after the needle reads none of it in any layer or head, and the
    study and the page call it a loss by construction, not "no detectable loss"; a window holding the
    whole prompt reads all of it (each sliding-attention layer only what its own window reaches)."""
    loaded = load_cached(family, "float32")
    prompts = _prompts(loaded, depths=(0.5,), n=2)
    small, whole = (parse_op(s).spec for s in ("window:size=24,sinks=2", "window:size=100000,sinks=4"))
    run = retrieval.score_retrieval(loaded, [small, whole], prompts, progress=False)
    windows = layers.layer_windows(loaded.config)
    for regime in retrieval.REGIMES:
        for shares in run["ops"][small][regime]["needle_kept"]:
            assert len(shares) == loaded.config.num_hidden_layers and retrieval.lost_by_construction(shares)
        for p, shares in zip(prompts, run["ops"][whole][regime]["needle_kept"]):
            query = p.answer + p.key_from - 1
            for layer, w in zip(shares, windows):
                inside = 1.0 if w is None else float(np.mean([query - s < w for s in range(*p.needle)]))
                assert layer == [pytest.approx(inside, abs=1e-4)] * len(layer)
            assert not retrieval.lost_by_construction(shares)
    entry = {regime: {"per_prompt": got["per_prompt"], **study.needle_summary(got["needle_kept"], got["per_prompt"])}
             for regime, got in run["ops"][small].items()}
    assert entry["aware"]["construction_losses"]["prompts"] == [0, 1]
    result = {"exact": {"per_prompt": run["exact"]}, "ops": {"window@0.25": {"level": 0.25, **entry}}}
    for regime in retrieval.REGIMES:
        result["ops"]["window@0.25"][regime]["prompts"] = [0, 1]
    result["verdicts"] = study.verdicts(result)
    from kvutils.report.chapter4_tables import retrieval_verdicts

    verdict = retrieval_verdicts(result, "agnostic")["window@0.25"]
    assert verdict.built == 2 and verdict.n == 2 and "needle gone on 2 prompts" in verdict.words
    assert verdict.mark.endswith("=")


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gemma3"])
def test_the_needle_kept_share_is_what_the_press_kept_there(family):
    """A press's needle shares are, per layer and KV head, the mean of its own kept set (what the
    fast path reports it applied) over the needle's positions, capped by each sliding window."""
    loaded = load_cached(family, "float32")
    p = _prompts(loaded, depths=(0.5,), n=1)[0]
    spec = "snapkv:compression_ratio=0.5,window=8"
    run = retrieval.score_retrieval(loaded, [spec], [p], progress=False)
    query = p.answer + p.key_from - 1
    for regime in retrieval.REGIMES:
        P = retrieval.prefill_length(p, regime)
        stats = {}
        score_fast(loaded, parse_op(spec), torch.tensor(p.ids), P, p.context - 1 - P, stats=stats)
        for held, window, got in zip(stats["held"], layers.layer_windows(loaded.config),
                                     run["ops"][parse_op(spec).spec][regime]["needle_kept"][0]):
            slots = torch.arange(*p.needle)
            visible = held[:, slots] & ((query - slots) < window if window else True)
            assert got == pytest.approx(visible.float().mean(-1).tolist(), abs=1e-4)


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gemma3"])
def test_the_shared_prefill_gives_what_each_method_computes_alone(family):
    """score_retrieval (one prefill, the agnostic one cut from it, presses deciding layer by layer
    from remembered weights) against each method scored alone on its own prefill: the fast path,
    and the step path for a decode-time policy."""
    loaded = load_cached(family, "float32")
    prompts = _prompts(loaded, n=2)
    specs = ["snapkv:compression_ratio=0.5,window=8", "random:compression_ratio=0.5", "knorm:compression_ratio=0.25",
             "expected_attention:compression_ratio=0.5,future=16", "quantize_naive:bits=4",
             "window:size=40,sinks=4", "tova:compression_ratio=0.5", "pyramidkv:compression_ratio=0.5,window=8"]
    run = retrieval.score_retrieval(loaded, specs, prompts, progress=False)
    for spec in specs:
        op = parse_op(spec)
        path = score_fast if op.has_fast_path else score_step
        for regime in retrieval.REGIMES:
            for i, p in enumerate(prompts):
                P = retrieval.prefill_length(p, regime)
                alone = retrieval.answer_record(path(loaded, op, torch.tensor(p.ids), P, p.context - 1 - P), p)
                got = run["ops"][op.spec][regime]["per_prompt"][i]
                # the agnostic prefill is cut from the longer one: its fp32 residue (chapter 1) may flip a
                # near-tie at a press's top-k boundary (one entry of one head), hence a relative tolerance
                assert got["key_logprob"] == pytest.approx(alone["key_logprob"], rel=1e-4, abs=1e-3), (spec, regime)


def test_a_model_below_the_gate_is_not_judged():
    """A tiny random model retrieves nothing: the exact cache is below 80 % everywhere, so no method
    is scored or judged there."""
    loaded = load_cached("tiny-llama", "float32")
    prompts = _prompts(loaded, contexts=(160, 192))
    labels = {c: study.method_specs(next(p for p in prompts if p.context == c), loaded.config) for c in (160, 192)}
    result = study.score_haystack(loaded, prompts, labels, progress=False)
    assert result["gate"] == {"160": False} and result["not_run"] == {"192": 160} and result["ops"] == {}
    assert len(result["exact"]["per_prompt"]) == 3  # the longer context is not run after a failure
    assert study.verdicts(result) == []
    from kvutils.report import figures
    from kvutils.report import retrieval as page

    result["verdicts"] = []
    numbers = {"retrieval": {"tiny-llama": {"pydoc": result, "kl_vs_retrieval": study.kl_vs_retrieval(None, {})}}}
    fig = page.plot_retrieval(numbers["retrieval"])
    assert figures.illegible_text(fig) == []
    assert "below the 80 % gate" in " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert page.depth_table(numbers["retrieval"]).empty
    assert list(page.exact_table(numbers["retrieval"])["all"]) == ["0 %", "not run"]
    from kvutils.report import chapter4_tables

    assert chapter4_tables.retrieval_table(numbers["retrieval"]).empty  # no method judged below the gate
    assert chapter4_tables.tau_rows(numbers["retrieval"], {}) == []


def test_verdicts_pair_each_method_with_the_exact_cache_and_its_baselines():
    rng = random.Random(0)
    exact = [{"depth": 0.5, "context": 1024, "correct": True, "key_logprob": -0.1} for _ in range(30)]

    def records(p_right):
        return [{"depth": 0.5, "context": 1024, "correct": rng.random() < p_right, "key_logprob": -1.0} for _ in range(30)]
    entry = lambda p: {"level": 0.5, "agnostic": {"per_prompt": records(p), "prompts": list(range(30))},  # noqa: E731
                       "aware": {"per_prompt": records(p), "prompts": list(range(30))}}
    result = {"exact": {"per_prompt": exact}, "ops": {"snapkv@0.5": entry(0.0), "random@0.5": entry(1.0),
                                                       "window@0.5": entry(1.0)}}
    v = study.verdicts(result)
    lost = [x for x in v if x["a"] == "snapkv@0.5" and x["b"] == "exact" and x["metric"] == "correct"]
    assert lost and all(x["verdict"] == "a<b" and x["n"] == 30 for x in lost)
    assert any(x["a"] == "snapkv@0.5" and x["against"] == "random" for x in v)
    assert any(x["against"] == "regime" for x in v)


def test_kl_ranking_agreement_is_computed_with_its_interval():
    """Four methods whose KL order is exactly the reverse of their accuracy: τ = -1, and the
    bootstrap interval lies below 0 with enough documents and prompts."""
    rng = np.random.default_rng(0)
    names = ["random@0.5", "knorm@0.5", "snapkv@0.5", "window@0.5"]
    frontier = {"ops": {}}
    for i, name in enumerate(names):
        spec = {"random@0.5": "random:compression_ratio=0.5", "knorm@0.5": "knorm:compression_ratio=0.5",
                "snapkv@0.5": "snapkv:compression_ratio=0.5", "window@0.5": "window:size=576,sinks=4"}[name]
        frontier["ops"][spec] = {"per_doc_kl": list(0.1 * (i + 1) + 0.001 * rng.random(8)), "level": 0.5}
    results = {"pydoc": {"ops": {n: {"aware": {"per_prompt": [{"correct": j < 40 - 10 * i} for j in range(40)]}}
                                 for i, n in enumerate(names)}}}
    k = study.kl_vs_retrieval(frontier, results)["levels"]["0.5"]
    assert k["tau"] == pytest.approx(-1.0) and k["predicts"] and k["ci95"][1] < 0
    assert k["n_documents"] == 8 and k["n_prompts"] == 40


def test_the_kl_scatter_places_each_method_with_both_intervals():
    """The comparison as the page draws it: one point per method, its mean KL inside its bootstrap
    interval over the documents, its accuracy inside its Clopper–Pearson interval over the prompts,
    the panel titled with τ; a figure with a title, labelled axes and its legend."""
    from kvutils.core import compare
    from kvutils.report import figures
    from kvutils.report import retrieval as page

    rng = np.random.default_rng(0)
    names = ["random@0.5", "knorm@0.5", "snapkv@0.5"]
    specs = {"random@0.5": "random:compression_ratio=0.5", "knorm@0.5": "knorm:compression_ratio=0.5",
             "snapkv@0.5": "snapkv:compression_ratio=0.5"}
    frontier = {"ops": {specs[n]: {"per_doc_kl": list(0.1 * (i + 1) + 0.01 * rng.random(8)), "level": 0.5}
                        for i, n in enumerate(names)}}
    hay = {"ops": {n: {r: {"per_prompt": [{"correct": j < 40 - 10 * i} for j in range(40)]} for r in ("aware", "agnostic")}
                   for i, n in enumerate(names)}}
    model = {"pydoc": hay, "kl_vs_retrieval": study.kl_vs_retrieval(frontier, {"pydoc": hay})}
    points = page.kl_points({"m": model}, {"m": frontier})
    assert list(points["label"]) == names and set(points["n"]) == {40}
    for _, p in points.iterrows():
        kl = frontier["ops"][specs[p["label"]]]["per_doc_kl"]
        assert p["mean KL"] == pytest.approx(np.mean(kl)) and p["kl_lo"] < p["mean KL"] < p["kl_hi"]
        right = round(p["accuracy %"] * 40 / 100)
        assert (p["acc_lo"], p["acc_hi"]) == pytest.approx(tuple(100 * x for x in compare.proportion_interval(right, 40)))
    fig = page.plot_kl_vs_retrieval({"m": model}, {"m": frontier})
    ax = fig.axes[0]
    assert ax.get_title().startswith("m, evicts 50 %\nKendall's τ = -1.00") and "nats" in ax.get_xlabel()
    assert fig.legends and fig._suptitle.get_text().startswith("Does the KL frontier predict retrieval?")
    assert figures.covered_or_clipped(fig) == [] and figures.overlapping_text(fig) == []


def test_the_page_shows_every_method_and_regime_legibly(monkeypatch):
    """With the gate lowered (a tiny random model retrieves nothing), every part of the page is
    drawn from a real run: the chart names both models' panels, the tables hold every method, and
    the glued sentences carry n and the interval or say that nothing separates."""
    from kvutils.report import figures
    from kvutils.report import retrieval as page

    monkeypatch.setattr(study, "GATE", 0.0)
    numbers = {"retrieval": {}}
    for family in ("tiny-llama", "tiny-gemma3"):
        loaded = load_cached(family, "float32")
        prompts = {"pydoc": _prompts(loaded, contexts=(160,), n=3), "filler": _prompts(loaded, "filler", contexts=(160,), n=3)}
        numbers["retrieval"][family] = study.run_model(loaded, prompts, None, progress=False)
    result = numbers["retrieval"]["tiny-llama"]["pydoc"]
    tiny = load_cached("tiny-llama", "float32")
    specs = study.method_specs(_prompts(tiny, n=1)[0], tiny.config)
    # every method is on the page, the extra random seeds folded into their level's random row
    assert set(result["ops"]) == {label for label in specs if not label.startswith(study.SEED_LABEL)}
    for level in study.LEVELS:
        for regime in retrieval.REGIMES:
            seeds = result["ops"][f"random@{level:g}"][regime]["seeds"]
            assert seeds["seed"] == list(study.RANDOM_SEEDS) and seeds["n"] == 3
            assert seeds["correct"][0] == sum(x["correct"] for x in result["ops"][f"random@{level:g}"][regime]["per_prompt"])
    assert {f"tova@{level:g}" for level in study.LEVELS} <= set(result["ops"])
    from kvutils.report import retrieval_seeds
    seeds_table = retrieval_seeds.seeds_table(numbers["retrieval"])
    assert len(seeds_table) == 2 * 2 * 2 * 2  # models, haystacks, levels, regimes
    assert seeds_table["keys retrieved, seed by seed"].str.contains("(seed 1)", regex=False).all()
    fig = page.plot_retrieval(numbers["retrieval"])
    assert figures.illegible_text(fig) == [] and "tiny-gemma3" in fig._suptitle.get_text()
    assert len(page.depth_table(numbers["retrieval"])) == 2 * 2 * len(result["ops"])
    assert len(page.exact_table(numbers["retrieval"])) == 4
    from kvutils.report import chapter4_tables

    table = chapter4_tables.retrieval_table(numbers["retrieval"])
    assert len(table) == 2 * 2 * len(result["ops"])  # every method, both models and both texts
    assert table["keys, question after"].str.endswith("p = 1").sum() + table["keys, question after"].str.contains(
        "p = ").sum() >= len(table) and table.filter(like="verdict").map(lambda v: v[0] in "✓✗≈?").all().all()
    assert chapter4_tables.tau_rows(numbers["retrieval"], {}) == []  # the frontier was not run
    kvpress = page.kvpress_table(numbers["retrieval"])
    passed = sum(any(r["gate"].values()) for res in numbers["retrieval"].values() for r in page.haystacks(res).values())
    assert kvpress is None if not passed else len(kvpress) == passed and not kvpress.isna().any().any()
    needle = page.plot_needle(numbers["retrieval"])
    assert figures.illegible_text(needle) == [] and "needle" in needle._suptitle.get_text()
    points = page.retrieval_points(numbers["retrieval"])
    assert points["needle readable %"].between(0, 100).all()
    # what run_model writes follows the results file's format, the needle's records included
    from jsonschema import Draft202012Validator

    from kvutils.core import results, schema
    format_ = json.loads(schema.schema_path("04_cache_approximations").read_text())
    written = results.as_written(numbers["retrieval"])
    assert "construction_losses" in written["tiny-llama"]["pydoc"]["ops"]["window@0.25"]["aware"]
    assert list(Draft202012Validator(format_["properties"]["numbers"]["properties"]["retrieval"])
                .iter_errors(written)) == []


def test_random_seeds_fold_into_one_row_with_their_mean_and_range():
    """Three seeds' keys retrieved (2, 1 and 0 of 2 prompts): one random@0.5 row keeps the first
    seed's records and carries every seed's count, their mean (50 %) and range (0-100 %)."""
    def entry(spec, rights):
        return {"specs": {"1024": spec}, "level": 0.5, "family": "press",
                **{r: {"per_prompt": [{"correct": c} for c in rights]} for r in retrieval.REGIMES}}
    ops = {"random@0.5": entry("random:compression_ratio=0.5,seed=0", [True, True]),
           f"{study.SEED_LABEL}1@0.5": entry("random:compression_ratio=0.5,seed=1", [True, False]),
           f"{study.SEED_LABEL}2@0.5": entry("random:compression_ratio=0.5,seed=2", [False, False]),
           "knorm@0.5": entry("knorm:compression_ratio=0.5", [True, False])}
    folded = study.fold_seeds(ops)
    assert set(folded) == {"random@0.5", "knorm@0.5"} and "seeds" not in folded["knorm@0.5"]["aware"]
    seeds = folded["random@0.5"]["aware"]["seeds"]
    assert seeds == {"seed": [0, 1, 2], "correct": [2, 1, 0], "n": 2, "mean_accuracy": 0.5, "accuracy_range": [0.0, 1.0]}
    assert folded["random@0.5"]["aware"]["per_prompt"] == ops["random@0.5"]["aware"]["per_prompt"]


def test_a_decode_time_policy_joins_each_level_at_the_matched_budget():
    """tova at each level holds, on average over the agnostic decode, what the press at that level
    holds (the window's budget), and the frontier's matched tova maps to the same label."""
    from kvutils.cache.methods.press import kept_per_head
    from kvutils.studies.cache_approximations import frontier

    prompt = haystack.Prompt(ids=tuple(range(1024)), question=1000, answer=1020, needle=(100, 120), depth=0.1,
                             context=1024, key="1234567", word="bank", haystack="pydoc")
    specs = study.method_specs(prompt)
    for level in study.LEVELS:
        tova = parse_op(specs[f"tova@{level:g}"])
        P, D = 1000, 1024 - 1 - 1000
        assert kept_per_head(P, tova.compression_ratio) == frontier.matched_budget(P, D, level)
        assert study.frontier_label(tova.spec, level) == f"tova@{level:g}"
        second_seed = parse_op(f"random:compression_ratio={level},seed=1").spec
        assert specs[f"{study.SEED_LABEL}1@{level:g}"] == second_seed
    assert study.frontier_label("h2o:compression_ratio=0.5", 0.5) is None  # not scored on retrieval
