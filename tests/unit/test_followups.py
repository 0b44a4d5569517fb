"""Follow-up questions (issue 51): several needles per haystack, the cache compressed once, each
needle asked in turn. The exact cache extended by turn 1 is the cache of the concatenated text, a
method that keeps everything answers every follow-up as the exact cache, the rotation puts every
depth first and in each follow-up turn equally often, and the verdicts and the report are computed."""
import collections
import json
import random

import matplotlib.text
import pytest
import torch
from transformers import DynamicCache

from kvutils.cache import retrieval
from kvutils.cache.registry import parse_op
from kvutils.core import haystack
from kvutils.studies.cache_approximations import followups
from kvutils.studies.cache_approximations import retrieval as study
from tests.conftest import load_cached

FP64_TOL = 1e-9  # nats: fp64 summation-order residue between a chunked and a one-shot prefill
FP32_TOL = 1e-4  # nats: the same residue in fp32 (the shared prefill's head against its own prefill)


def _prompts(loaded, n=3, context=192, turns=3, depths=(0.1, 0.5, 0.9)):
    return haystack.build_prompts(loaded.tokenizer, "pydoc", [context], list(depths), n, needle="magic", turns=turns)


def test_needle_rotation_balances_depths():
    loaded = load_cached("tiny-llama", "float32")
    prompts = _prompts(loaded, n=6, context=256)
    by_turn = collections.defaultdict(collections.Counter)
    for p in prompts:
        turns = (p, *p.followups)
        assert len(p.ids) == p.context and p.chain[:p.context] == p.ids
        assert sorted(t.depth for t in turns) == [0.1, 0.5, 0.9]  # every needle asked once
        assert len({t.needle for t in turns}) == 3 and len({t.key for t in turns}) == 3
        for i, t in enumerate(turns, start=1):
            by_turn[i][t.depth] += 1
            assert t.key in loaded.tokenizer.decode(list(p.chain[t.needle[0]:t.needle[1]]))
            assert loaded.tokenizer.decode(list(t.ids[t.answer:])).strip() == t.key
            assert t.ids == p.chain[:len(t.ids)] and t.word in loaded.tokenizer.decode(list(t.ids[t.question:t.answer]))
    assert all(counts == {0.1: 2, 0.5: 2, 0.9: 2} for counts in by_turn.values()), by_turn
    # each needle of a haystack has its own shape, its question that shape's words; over 9 prompts every
    # depth meets every shape on turn 1 once
    nine = _prompts(loaded, n=9, context=256)
    firsts = collections.Counter((p.depth, p.shape) for p in nine)
    assert firsts == {(d, s): 1 for d in (0.1, 0.5, 0.9) for s in haystack.SHAPES}, firsts
    for p in nine:
        turns = (p, *p.followups)
        assert sorted(t.shape for t in turns) == sorted(haystack.SHAPES)
        for t in turns:
            asked = loaded.tokenizer.decode(list(t.ids[t.question:t.answer]))
            assert asked == haystack.TEMPLATES[t.shape][1].format(word=t.word)
    # turn 1 is today's prompt shape; one turn gives exactly today's prompts
    one = _prompts(loaded, n=6, context=256, turns=1)
    assert one == haystack.build_prompts(loaded.tokenizer, "pydoc", [256], [0.1, 0.5, 0.9], 6, needle="magic")
    assert [p.depth for p in prompts] == [p.depth for p in one] and not any(p.followups for p in one)


def test_bad_turns_are_refused_by_name():
    loaded = load_cached("tiny-llama", "float32")
    with pytest.raises(ValueError, match="turns"):
        haystack.build_prompts(loaded.tokenizer, "filler", [256], [0.5], 3, needle="passkey", turns=2)
    with pytest.raises(ValueError, match="turns"):
        _prompts(loaded, turns=4)  # more turns than depths


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-qwen3"])
def test_the_exact_cache_extended_by_turn_one_is_the_cache_of_the_concatenated_text(family):
    """A server's cache: the haystack prefilled, then turn 1's question and answer and the follow-up
    appended through the cache (transformers' DynamicCache, chunk by chunk), answers the follow-up
    as one fresh prefill of the concatenated text does, and so does the scorer's exact record (fp64)."""
    loaded = load_cached(family, "float64")
    prompts = _prompts(loaded, n=3)
    run = retrieval.score_retrieval(loaded, [], prompts, progress=False)
    for p, followed in zip(prompts, run["exact_followups"]):
        chain = torch.tensor(p.chain)[None]
        with torch.inference_mode():
            fresh = loaded.model(input_ids=chain).logits[0]  # (chain, vocab): no cache at all
            cache, served = DynamicCache(), []
            cuts = [0, p.question, *(t.question for t in p.followups), chain.shape[1]]
            for a, b in zip(cuts, cuts[1:]):  # the haystack, then each turn's question and answer
                out = loaded.model(input_ids=chain[:, a:b], cache=cache, use_cache=True,
                                   position_ids=torch.arange(a, b)[None])
                cache, served = out.past_key_values, served + [out.logits[0]]
        served = torch.cat(served)
        assert (served - fresh).abs().max() < 1e-9
        for t, got in zip(p.followups, followed):
            rows = slice(t.answer - 1, len(t.ids) - 1)  # the logits predicting the answer's tokens
            want = retrieval.answer_record(fresh[rows], t)
            served_record = retrieval.answer_record(served[rows], t)
            assert got["correct"] == want["correct"] == served_record["correct"]
            assert got["key_logprob"] == pytest.approx(want["key_logprob"], abs=FP64_TOL)
            assert served_record["key_logprob"] == pytest.approx(want["key_logprob"], abs=FP64_TOL)
            assert got["depth"] == t.depth and got["turn"] == 2 + p.followups.index(t)


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gemma3"])
def test_a_method_that_keeps_everything_gives_identical_follow_ups(family):
    """Tie by construction: a window wider than the chain and a press evicting nothing answer every
    follow-up, in both regimes, as the exact cache does."""
    loaded = load_cached(family, "float32")
    prompts = _prompts(loaded)
    run = retrieval.score_retrieval(loaded, ["window:size=100000,sinks=4", "snapkv:compression_ratio=0,window=8"],
                                    prompts, progress=False)
    for got in run["ops"].values():
        for regime in retrieval.REGIMES:
            assert all(len(f) == 2 for f in got[regime]["followups"])
            for mine, exact in zip(got[regime]["followups"], run["exact_followups"]):
                for r, e in zip(mine, exact):
                    assert (r["correct"], r["turn"], r["depth"]) == (e["correct"], e["turn"], e["depth"])
                    assert r["key_logprob"] == pytest.approx(e["key_logprob"], abs=FP32_TOL)
            for shares in got[regime]["followup_needle_kept"]:
                assert not any(retrieval.lost_by_construction(s) for s in shares)


def test_the_study_summarises_gates_and_names_losses_by_construction(monkeypatch):
    """A 16-token window cannot hold an early needle when a later question is asked: those follow-ups
    are named losses by construction; the step path names its follow-ups not scored."""
    monkeypatch.setattr(study, "GATE", 0.0)  # a tiny random model retrieves nothing: judge it anyway
    loaded = load_cached("tiny-llama", "float32")
    prompts = _prompts(loaded)
    labels = {192: {label: parse_op(spec).spec for label, spec in (
        ("window@0.5", "window:size=16,sinks=4"), ("tova@0.5", "tova:compression_ratio=0.5"),
        ("bf16", "cast:dtype=bfloat16"))}}
    result = study.score_haystack(loaded, prompts, labels, progress=False)
    assert result["gate_followups"] == {"192": True}
    assert result["exact"]["followups"]["n"] == 6 and set(result["exact"]["followups"]["by_turn"]) == {"2", "3"}
    window = result["ops"]["window@0.5"]["agnostic"]["followups"]
    lost = window["construction_losses"]["questions"]
    assert lost and result["ops"]["bf16"]["agnostic"]["followups"]["construction_losses"]["questions"] == []
    for i, turn in lost:  # the asked needle lies wholly outside the 4 sinks and the 16 latest entries
        asked = prompts[i].followups[turn - 2]
        assert asked.needle[0] >= 4 and asked.needle[1] <= asked.answer + asked.key_from - 1 - 16
    assert result["ops"]["tova@0.5"]["aware"]["followups"] == {"not_scored": retrieval.STEP_FOLLOWUPS}
    verdicts = followups.verdicts(result)
    assert {(v["against"], v["regime"]) for v in verdicts if v["a"].startswith("bf16")} == {
        ("turn1", "agnostic"), ("turn1", "aware"), ("exact", "agnostic"), ("exact", "aware"), ("regime", "both")}
    assert not any(v["a"].startswith("tova") for v in verdicts)
    assert all(v["n"] == 3 and v["unit"] == "prompts" for v in verdicts)


def _synthetic(n=30, seed=0):
    """A result whose 'snapkv@0.5' answers turn 1 always and follow-ups never; 'bf16' both always."""
    rng = random.Random(seed)
    prompts = [{"context": 1024, "depth": 0.1} for _ in range(n)]
    turn1 = lambda ok: [{"depth": 0.1, "context": 1024, "correct": ok, "key_logprob": -0.1} for _ in range(n)]  # noqa: E731

    def fups(ok):
        return [[{"depth": d, "context": 1024, "correct": ok, "key_logprob": rng.uniform(-2, -1), "turn": t}
                 for t, d in ((2, 0.5), (3, 0.9))] for _ in range(n)]

    def entry(ok1, ok2):
        f = fups(ok2)
        kept = [[[[1.0]]] * 2] * n  # (follow-ups, layers, kv_heads) needle shares: nothing lost
        r = {"per_prompt": turn1(ok1), "prompts": list(range(n)), "followups": {**followups.block(f),
                                                                               **followups.losses(kept, f)}}
        return {"level": None, "family": "x", "agnostic": r, "aware": dict(r)}
    tova = {"per_prompt": turn1(True), "prompts": list(range(n)), "followups": {"not_scored": "step path"}}
    return {"exact": {"per_prompt": turn1(True), "followups": followups.block(fups(True))},
            "gate": {"1024": True}, "gate_followups": {"1024": True}, "contexts": [1024], "prompts": prompts,
            "ops": {"snapkv@0.5": entry(True, False), "cast:dtype=bfloat16": entry(True, True),
                    "tova@0.5": {"level": 0.5, "family": "x", "agnostic": tova, "aware": tova}}}


def test_verdicts_say_which_method_loses_its_follow_ups():
    v = followups.verdicts(_synthetic())
    lost = [x for x in v if x["a"] == "snapkv@0.5 follow-ups" and x["against"] == "turn1"]
    assert lost and all(x["verdict"] == "a<b" and x["n"] == 30 and x["effect"] == -1.0 for x in lost)
    kept = [x for x in v if x["a"] == "cast:dtype=bfloat16 follow-ups" and x["against"] == "turn1"]
    assert kept and all(x["verdict"] == "identical" for x in kept)


def test_the_followup_figure_and_table():
    from kvutils.report import figures
    from kvutils.report import followups as page

    hay = _synthetic()
    hay["followup_verdicts"] = followups.verdicts(hay)
    numbers = {"smollm2-135m": {"pydoc": hay, "filler": {"ops": {}, "exact": {"per_prompt": []}}}}
    fig = page.plot_followups(numbers)
    texts = " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert "smollm2-135m" in texts and "keys retrieved" in texts.lower() and figures.illegible_text(fig) == []
    table = page.followup_table(numbers)
    assert table.index.name == "method" and list(table.columns)[:3] == ["turn 1", "follow-up", "exact"]
    assert 'class="dataframe kvutils-table"' in table._repr_html_()  # rows headed by their method, not 0, 1, 2
    assert any("n = 30" in c for c in table.columns)
    row, bf16 = table.iloc[0], table.iloc[1]  # the methods in the results' order
    assert row["turn 1"] == "100 %" and row["follow-up"] == "0 %" and "loses" in row.iloc[-1]
    assert "same as turn 1 on every prompt" in bf16.iloc[-1]  # not "keeps": 0 % twice is identical too
    tova = table.iloc[2]  # a step-path policy: turn 1 only, its follow-ups named not scored
    assert tova["turn 1"] == "100 %" and tova["follow-up"] == "–" and tova.iloc[-1] == "step path"


def test_the_book_asks_follow_ups(monkeypatch):
    """The study's switch: TURNS needles per real-text haystack, the filler's pass key left alone;
    TURNS = 1 gives one question per haystack."""
    from kvutils.book import chapters
    from kvutils.studies.cache_approximations import study as approx_study
    from kvutils.studies.parameters import Chapter4Parameters

    p = Chapter4Parameters(**dict(chapters.QUICK["04_cache_approximations"], corpus="pydoc", device="cpu"))
    tok = load_cached("tiny-llama", "float32").tokenizer
    assert followups.TURNS == 2
    prompts = approx_study.retrieval_prompts(tok, p)
    turns = min(followups.TURNS, len(haystack.check_depths(p.retrieval_depths)))
    assert turns > 1 and all(len(q.followups) == turns - 1 for q in prompts[p.retrieval_corpus])
    assert not any(q.followups for q in prompts.get("filler", []))
    monkeypatch.setattr(followups, "TURNS", 1)
    assert not any(q.followups for qs in approx_study.retrieval_prompts(tok, p).values() for q in qs)


def test_the_acceptance_cli_asks_follow_ups(tmp_path, capsys):
    """`--task passkey --turns 3`: per operation and regime, the follow-ups' keys found and their
    paired verdicts against turn 1 and the exact cache, printed and written."""
    from kvutils import accept as acceptance
    from kvutils.core import compare

    out = tmp_path / "turns.json"
    argv = ["--task", "passkey", "--model", "tiny-llama", "--haystack", "pydoc", "--context", "192", "--n-prompts", "3",
            "--turns", "3", "--op", "window:size=32,sinks=4", "--op", "tova:compression_ratio=0.5", "--out", str(out)]
    assert acceptance.main(argv) == 0
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())
    f = written["followups"]
    assert written["turns"] == 3 and f["exact"]["n"] == 6 and "follow-up questions (turns 2 to 3" in printed
    x = f["ops"]["window:size=32,sinks=4,reindex=false"]["agnostic"]
    share = [sum(r["correct"] for r in rs) / 2 for rs in x["per_prompt"]]
    turn1 = [float(r["correct"]) for r in written["ops"]["window:size=32,sinks=4,reindex=false"]["agnostic"]["per_prompt"]]
    want = compare.paired(share, turn1, "window:size=32,sinks=4,reindex=false (agnostic) follow-ups", "turn 1", "prompts")
    assert x["vs_turn1"] == json.loads(json.dumps(want.to_dict())) and x["line"] in printed
    assert f["ops"]["tova:compression_ratio=0.5"]["aware"] == {"not_scored": retrieval.STEP_FOLLOWUPS}


@pytest.mark.parametrize("argv, words", [
    (["--haystack", "filler", "--turns", "2"], "--turns: the pass key has one needle"),
    (["--turns", "4"], "--turns"),
])
def test_bad_turns_are_refused_by_the_cli_before_the_model_loads(argv, words, capsys):
    from kvutils import accept as acceptance

    with pytest.raises(SystemExit):
        acceptance.main(["--task", "passkey", "--model", "tiny-llama", "--op", "knorm:compression_ratio=0.5",
                         "--context", "256", *argv])
    assert words in capsys.readouterr().err
