"""Chapter 5's notebook run: a bad k stops it in its first cell; the quick profile's results hold
the switch identities (tail patch == recompute, stale only in the tail, the activated adapter's exact
prefix, the patch map's control), and its glue and chart state what the run measured."""
import json

import pytest
from conftest import run_failing_chapter

from kvutils.studies.qwen3_switch import study as switch


def test_notebook_stops_in_its_first_cell_on_a_bad_k(tmp_path):
    error, cell = run_failing_chapter("05", tmp_path, {"k_values": "2,9"})  # patch_k 2 among them
    assert "k_values: k=9 is not allowed" in error and "switch.plan(" in cell


def test_chapter5_quick_results_hold_the_identities(quick_chapters):
    root, _ = quick_chapters
    record = json.loads((root / "results" / "05_qwen3_switch.json").read_text())
    assert record["parameters"]["models"] == "tiny-qwen3" and record["parameters"]["task"] == "continuation"
    r = record["numbers"]["tiny-qwen3"]
    n_layers = r["layers"]
    assert n_layers == 4 and r["k_values"][-1] == n_layers
    for k in r["k_values"]:
        scores, layers = r["switch"]["scores"][f"tail{k}"], r["switch"]["cache_layers"][f"tail{k}"]
        assert scores["tail_patch"]["max_abs_logit_diff"] <= switch.TOLERANCE["float32"]
        assert max(layers["tail_patch"]) <= switch.TOLERANCE["float32"]
        assert layers["stale"][:n_layers - k] == [0.0] * (n_layers - k)
        assert all(d > 0 for d in layers["stale"][n_layers - k:])
        assert scores["stale"]["max_abs_logit_diff"] > 0
        cost = r["cost"]["per_k"][str(k)]
        assert cost["tail_flops_fraction"] == pytest.approx(k / n_layers, rel=0.2)
        assert cost["stale"]["flops"] == 0
        assert r["switch"]["cache_layers"][f"activated{k}"]["prefix_vs_base"] == [0.0] * n_layers
    assert r["patching"]["prefix_kv_max_diff"] == 0 and r["patching"]["control_max_abs_delta"] <= 1e-5
    assert r["patching"]["row_labels"][:4] == [f"passage A {i}/4" for i in range(1, 5)]
    # what a script reads: accuracy with n for the base and every adapter, held out
    training, n = r["training"], record["parameters"]["n_heldout"]
    assert training["zero_shot"]["heldout"]["n"] == n and 0 <= training["zero_shot"]["heldout"]["accuracy_pct"] <= 100
    assert sorted(training["adapters"]) == sorted([f"tail{k}" for k in r["k_values"]] + [f"activated{k}" for k in r["k_values"]])
    for adapter in training["adapters"].values():
        assert adapter["heldout"]["n"] == n and len(adapter["losses"]) == record["parameters"]["steps"]
        low, high = adapter["heldout"]["ci95_pct"]
        assert low <= adapter["heldout"]["accuracy_pct"] <= high
    curve = r["curve"]
    assert len(curve) == 3 * len(r["k_values"]) and {row["policy"] for row in curve} == {"tail_patch", "stale", "activated"}
    assert r["knee_k"] in r["k_values"] and r["knee"]["knee_k"] == r["knee_k"]
    # every comparison can be recomputed: per-example answers, in one order, for the base and every adapter
    labels = r["switch"]["heldout_examples"]["label"]
    assert len(labels) == n and sorted(labels) == [0] * (n // 2) + [1] * (n // 2)
    for adapter in training["adapters"].values():
        held = adapter["heldout"]
        assert len(held["right_per_example"]) == len(held["logodds_per_example"]) == n
        assert held["right_per_example"] == [int(x > 0) for x in held["logodds_per_example"]]
        assert 100 * sum(held["right_per_example"]) / n == pytest.approx(held["accuracy_pct"])
        assert 0 <= held["auc"] <= 1
    pm = r["patching"]
    assert len(pm["per_pair"]["clean"]) == pm["n_contexts"] == record["parameters"]["patch_pairs"]
    assert pm["n_clean_right"] == sum(c > 0 for c in pm["per_pair"]["clean"])
    assert all(c == pm["n_clean_right"] for row in pm["count"] for c in row)  # each cell's n: the right answers
    assert pm["foreign_control"]["n_pairs"] == pm["n_contexts"]
    assert max(pm["foreign_control"]["max_abs_delta_per_pair"]) > pm["control_max_abs_delta"]  # the one that can fail
    for figure in ("05_loss_curves", "05_quality_vs_cost", "05_cost_vs_exactness", "05_patching_map"):
        assert (root / "results" / "figures" / f"{figure}.png").stat().st_size > 10_000


def test_chapter5_evidence_states_what_the_quick_run_measured(quick_chapters):
    from kvutils.core import compare
    from kvutils.report import switch_evidence as rse
    from kvutils.report import switch_verdicts as rsv
    from kvutils.studies.qwen3_switch import verdicts as switch_verdicts

    root, _ = quick_chapters
    record = json.loads((root / "results" / "05_qwen3_switch.json").read_text())
    r = record["numbers"]["tiny-qwen3"]
    texts, tables = rse.chapter5_evidence(record["numbers"], record["parameters"])
    held, deep_k = r["switch"]["heldout"], r["k_values"][-1]
    deep, zero = held[f"tail{deep_k}"]["tail_patch"], r["training"]["zero_shot"]["heldout"]
    test = switch_verdicts.accuracy_pair(deep, zero, "a", "b")
    word = {"a>b": f"k = {deep_k} higher", "a<b": f"k = {deep_k} lower", "identical": "identical",
            "no detectable difference": "no detectable difference", "cannot separate": "cannot separate at this n"}
    row = rse.example_tests(record["numbers"]).loc[f"tiny-qwen3: k = {deep_k} tail against the base, accuracy"]
    assert row["verdict"] == word[test.verdict] and row["n"] == f"{deep['n']} held-out examples"
    knee = rsv.knee("tiny-qwen3", r)
    assert knee.startswith((f"tiny-qwen3: k = {r['knee_k']} (", "tiny-qwen3: not located at n = ",
                            "tiny-qwen3: not located: one k")) and "of L = 4" in knee
    assert compare.METHOD in texts["quality"][0]
    per_k = r["cost"]["per_k"]
    assert all(len(per_k[str(k)]["tail_patch"]["seconds_repeats"]) == record["parameters"]["timing_repeats"]
               for k in r["k_values"])
    # one timed repeat: no trend over k can be tested, and the page must not read one into the medians
    trend = rse.cost_tests(record["numbers"])["verdict"]
    assert not trend.str.endswith((" higher", " lower")).any()
    assert [caption for caption, _ in tables["cost"]][1].startswith("Its excess over k/L across k")


def test_the_interactive_quality_cost_chart_holds_every_adapter_and_policy(quick_chapters):
    """Every (k, policy) row of the curve is a point of the page's chart, at its measured switch time
    and accuracy, with k on hover (a chart that drops a policy or mixes the axes fails)."""
    root, _ = quick_chapters
    numbers = json.loads((root / "results" / "05_qwen3_switch.json").read_text())["numbers"]
    from kvutils.report import qwen3_switch as report_switch

    chart = report_switch.quality_cost_chart(numbers)
    points = [(round(x, 9), round(y, 9)) for trace in chart.figure.data for x, y in zip(trace.x, trace.y)]
    expected = [(round(100 * row["switch_time_fraction"], 9), round(row["accuracy_pct"], 9))
                for r in numbers.values() for row in r["curve"]]
    assert sorted(points) == sorted(expected)
    assert "kvutils-chart" in chart.html and "tiny-qwen3" in chart.html
