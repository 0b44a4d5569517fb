"""The decision guide's retrieval axis (kvutils.report.guide_retrieval): a guide row's operation is
found under its retrieval label, its keys retrieved and both tests read per regime, and a loss on
that axis turns a near-exact row costly (free only where both axes say so)."""
from kvutils.core import compare
from kvutils.report import guide
from kvutils.report.guide_retrieval import axis_text, label_for, loses_keys, retrieval_axis

SNAP = "snapkv:compression_ratio=0.25,window=64,kernel=5"


def _records(right: int, n: int = 24) -> list[dict]:
    return [{"correct": i < right, "key_logprob": -1.0, "context": 1024, "depth": 0.5} for i in range(n)]


def _verdict(a: str, regime: str, metric: str, verdict: str) -> dict:
    return {"a": a, "b": "exact", "n": 24, "effect": -0.2, "ci95": [-0.4, -0.1], "p": 0.01, "verdict": verdict,
            "unit": "prompts", "metric": metric, "regime": regime, "against": "exact"}


def _retrieval(gate: bool = True) -> dict:
    none, every = {"prompts": [], "correct": 0}, list(range(24))
    ops = {"snapkv@0.25": {"specs": {"1024": SNAP},
                           "aware": {"per_prompt": _records(22), "prompts": every, "construction_losses": none},
                           "agnostic": {"per_prompt": _records(6), "prompts": every, "construction_losses": none}},
           "cast:dtype=bfloat16": {"specs": {"1024": "cast:dtype=bfloat16"},
                                   "aware": {"per_prompt": _records(24), "prompts": every, "construction_losses": none},
                                   "agnostic": {"per_prompt": _records(24), "prompts": every,
                                                "construction_losses": none}}}
    verdicts = [_verdict("snapkv@0.25", "aware", "correct", compare.NO_DIFFERENCE),
                _verdict("snapkv@0.25", "agnostic", "correct", compare.A_LOWER),
                _verdict("cast:dtype=bfloat16", "aware", "correct", compare.NO_DIFFERENCE),
                _verdict("cast:dtype=bfloat16", "agnostic", "correct", compare.NO_DIFFERENCE)]
    return {"m": {"pydoc": {"gate": {"1024": gate}, "ops": ops, "verdicts": verdicts,
                            "exact": {"per_prompt": _records(24)}}, "kl_vs_retrieval": {}}}


def test_a_guide_row_finds_its_retrieval_label_by_its_spec():
    r = _retrieval()["m"]["pydoc"]
    assert label_for(r, "snapkv:window=64,compression_ratio=0.25,kernel=5") == "snapkv@0.25"  # spec order aside
    assert label_for(r, "cast:dtype=bfloat16") == "cast:dtype=bfloat16"
    assert label_for(r, "knorm:compression_ratio=0.25") is None
    assert label_for(r, "exact cache vs recomputation (ch. 1)") is None


def test_a_matched_budget_row_finds_the_label_of_its_level():
    """The frontier's window and tova hold budgets matched to a press level at 1,024 + 64 tokens,
    retrieval's at its own lengths: the specs differ, the level joins them (and nothing else does)."""
    r = _retrieval()["m"]["pydoc"]
    r["ops"]["tova@0.5"] = {"specs": {"1024": "tova:compression_ratio=0.484375"}}
    r["ops"]["window@0.5"] = {"specs": {"1024": "window:size=527,sinks=4,reindex=false"}}
    assert label_for(r, "tova:compression_ratio=0.46875", 0.5) == "tova@0.5"
    assert label_for(r, "window:size=576,sinks=4", 0.5) == "window@0.5"
    assert label_for(r, "tova:compression_ratio=0.46875") is None  # no level: not matched to any
    assert label_for(r, "tova:compression_ratio=0.46875", 0.25) is None  # no tova@0.25 scored here
    assert label_for(r, "h2o:compression_ratio=0.46875", 0.5) is None  # h2o is not on the retrieval test


def test_the_axis_reads_keys_and_tests_per_regime_and_names_the_loss():
    axis = retrieval_axis(_retrieval(), "m", SNAP)
    aware, agnostic = axis["pydoc"]["aware"], axis["pydoc"]["agnostic"]
    assert (aware["correct"], aware["n"], aware["lost"]) == (22, 24, False)
    assert (agnostic["correct"], agnostic["mcnemar"], agnostic["lost"]) == (6, compare.A_LOWER, True)
    assert loses_keys(axis) == ["pydoc, before the question"]
    assert axis_text(axis) == "pydoc: 92 / 25 % (n = 24); loses keys: pydoc, before the question"
    assert retrieval_axis(_retrieval(gate=False), "m", SNAP) is None  # no verdict where the exact cache fails
    assert retrieval_axis(_retrieval(), "other", SNAP) is None


def test_a_retrieval_loss_turns_a_near_exact_row_costly_and_no_loss_keeps_it():
    row = guide._row(SNAP, guide.NEAR, 99.5, "8 documents", test="above 99% (p = 0.008)")
    costly = guide.both_axes(row, retrieval_axis(_retrieval(), "m", SNAP))
    assert costly["verdict"] is guide.COSTLY
    assert "retrieval loses keys: pydoc before the question, 6 of 24 keys (fewer keys)" in costly["test"]
    kept = guide.both_axes(guide._row("cast:dtype=bfloat16", guide.NEAR, 99.9, "16 documents"),
                           retrieval_axis(_retrieval(), "m", "cast:dtype=bfloat16"))
    assert kept["verdict"] is guide.NEAR and "no detectable loss" in axis_text(kept["retrieval"])
    exact = guide.both_axes(guide._row(SNAP, guide.EXACT, 100.0, "8 documents"), retrieval_axis(_retrieval(), "m", SNAP))
    # a shift of the key's log-probability within chapter 4's margin, every key kept: not a loss, as on the page
    small = _retrieval()
    for regime in ("aware", "agnostic"):
        small["m"]["pydoc"]["ops"]["cast:dtype=bfloat16"][regime]["per_prompt"] = [
            dict(x, key_logprob=x["key_logprob"] - 0.01) for x in small["m"]["pydoc"]["exact"]["per_prompt"]]
    assert not any(v["lost"] for v in retrieval_axis(small, "m", "cast:dtype=bfloat16")["pydoc"].values())
    assert exact["verdict"] is guide.EXACT  # a tie by construction is not re-judged


def test_the_conclusions_cell_names_the_exact_cache_and_each_method_by_its_retrieval():
    from kvutils.report.guide_retrieval import retrieval_summary

    retrieval = _retrieval()
    retrieval["m"]["pydoc"]["exact"] = {"per_prompt": _records(23)}
    text = retrieval_summary(retrieval, "m")
    assert text == ("exact cache: keys of pydoc 23 of 24 prompts; losing keys somewhere: SnapKV (evicts 25 %); "
                    "no detectable loss: bfloat16 cache")
    retrieval["m"]["pydoc"]["gate"] = {"1024": False}
    assert retrieval_summary(retrieval, "m") == "exact cache: pydoc 23 of 24 prompts; below the gate, no method judged"
