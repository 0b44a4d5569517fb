"""Chapter 4's frontier: methods compared at equal mean held bytes over the decode, verdicts only
where the paired tests give them, ties by construction named from the config, a chart that tells
every method apart, and no frontier ("" frontier_models) drawn as "not run" instead of crashing."""
import matplotlib.text
import numpy as np
import pytest
from transformers import LlamaConfig

from kvutils.book import chapters
from kvutils.cache.registry import OPS, parse_op, parse_ops
from kvutils.report import figures
from kvutils.report import frontier as report_frontier
from kvutils.report.names import method_name
from kvutils.studies.cache_approximations import frontier
from kvutils.studies.cache_approximations import study as approx_study
from kvutils.studies.parameters import Chapter4Parameters

QUICK = dict(chapters.QUICK["04_cache_approximations"], corpus="pydoc", device="cpu")


def _config(kv_heads: int = 2) -> LlamaConfig:
    return LlamaConfig(num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=kv_heads, hidden_size=64,
                       head_dim=16, vocab_size=100)


def test_no_frontier_model_runs_end_to_end(no_model_loads):
    """`-p frontier_models ""` (documented as none): planned without a frontier, and every frontier
    output says "not run" (before: matplotlib's "number sections must be larger than 0")."""
    p = approx_study.plan(Chapter4Parameters(**{**QUICK, "frontier_models": ""}))
    assert p.frontier_models == [] and p.frontier_docs == {}
    fig = report_frontier.plot_frontier({})
    assert "not run" in " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))
    assert figures.illegible_text(fig) == []
    assert report_frontier.frontier_notes({}) == []
    assert report_frontier.setup_table({}) is None and report_frontier.kvpress_table({}) is None
    assert report_frontier.frontier_table({}).empty and report_frontier.keeps_table({}).empty


def test_frontier_parameters_are_checked_before_any_model_loads(no_model_loads):
    with pytest.raises(ValueError, match="frontier_prefill must be >= 1"):
        approx_study.plan(Chapter4Parameters(**{**QUICK, "frontier_prefill": 0}))
    with pytest.raises(ValueError, match=r"frontier_docs / frontier_prefill / frontier_decode: .*only \d+ of"):
        approx_study.plan(Chapter4Parameters(**{**QUICK, "frontier_docs": 40}))
    with pytest.raises(ValueError, match="frontier_ops: snapkv: window=8 is not allowed"):
        approx_study.plan(Chapter4Parameters(**{**QUICK, "frontier_prefill": 8}))
    p = approx_study.plan(Chapter4Parameters(**QUICK))
    assert all(len(ids) == 64 + 32 + 1 for docs in p.frontier_docs.values() for _, ids in docs)


def test_default_frontier_matches_fixed_budgets_to_press_levels():
    """h2o, tova and the 4-sink window hold what a press holds on average over the decode: at
    1,024 + 128, 512 + 128/2 = 576 entries per KV head at the 0.5 level."""
    specs = frontier.default_specs(1024, 128)
    assert "h2o:compression_ratio=0.4375" in specs and "tova:compression_ratio=0.4375" in specs
    assert {"window:size=832,sinks=4", "window:size=576,sinks=4"} <= set(specs)
    levels = frontier.by_level(parse_ops(specs), 1024, 128)
    assert sorted(levels) == [0.25, 0.5]
    # the presses and policies the frontier states at 0.5, and the window matched to that level
    at_half = {cls.name for cls in OPS.values() if "compression_ratio=0.5" in cls.frontier}
    assert {parse_op(s).name for s in levels[0.5]} == at_half | {"window"}
    assert {"snapkv", "h2o", "tova"} <= at_half
    assert not any("window:size=128,sinks=4,reindex=false" in specs for specs in levels.values())  # matches no level
    unmatched = frontier.by_level(parse_ops(["random:compression_ratio=0.5", "tova:compression_ratio=0.5"]), 1024, 128)
    assert unmatched == {0.5: ["random:compression_ratio=0.5,seed=0"]}  # 512 held vs 575.5 on average: not equal


def test_mean_held_bytes_over_the_decode():
    """A press grows by every decoded token, a decode-time policy holds its budget, the exact cache
    holds prefill + t: so a policy at the matched budget holds what the press holds on average."""
    import torch

    config, P, D = _config(), 1024, 128
    entry = 2 * 2 * 16 * 4 * config.num_hidden_layers  # keys + values, 2 KV heads, head_dim 16, fp32, all layers
    exact = frontier.mean_held_bytes(config, parse_op("exact"), P * entry, P, D, torch.float32)
    assert exact == pytest.approx(entry * (P + (D - 1) / 2))
    press = frontier.mean_held_bytes(config, parse_op("snapkv:compression_ratio=0.5"), 512 * entry, P, D, torch.float32)
    assert press == pytest.approx(entry * (512 + (D - 1) / 2))
    policy = frontier.mean_held_bytes(config, parse_op("h2o:compression_ratio=0.4375"), 576 * entry, P, D, torch.float32)
    assert policy == 576 * entry and abs(policy - press) <= entry
    window = frontier.mean_held_bytes(config, parse_op("window:size=576,sinks=4"), 0.0, P, D, torch.float32)
    assert window == pytest.approx(576 * entry)


def test_ties_by_construction_are_read_off_the_config_and_the_ops():
    ops = parse_ops(["snapkv:compression_ratio=0.5", "adakv:compression_ratio=0.5", "pyramidkv:compression_ratio=0.75",
                     "snapkv:compression_ratio=0.75", "pyramidkv:compression_ratio=0.25", "snapkv:compression_ratio=0.25"])
    one_head = frontier.construction_ties(_config(kv_heads=1), ops, 1024)
    pairs = {(parse_op(t["a"]).name, t["b"] and parse_op(t["b"]).compression_ratio): t["why"] for t in one_head}
    assert "one KV head" in pairs[("adakv", 0.5)]
    assert "falls back to SnapKV's budget" in pairs[("pyramidkv", 0.75)]  # the pyramid does not fit at 0.75
    assert ("pyramidkv", 0.25) not in pairs  # it fits at 0.25: a real PyramidKV
    assert not any(parse_op(t["a"]).name == "adakv" for t in frontier.construction_ties(_config(kv_heads=2), ops, 1024))
    short = frontier.construction_ties(_config(), parse_ops(["snapkv:compression_ratio=0.75"]), 128)
    assert short and short[0]["b"] is None and "no larger than its observation window (64)" in short[0]["why"]


def _run(per_doc: dict[str, list[float]], config=None, prefill: int = 1024, decode: int = 128) -> dict:
    """A frontier run as accept_many returns it (per-document KL only), analysed."""
    per_doc = {parse_op(spec).spec: kl for spec, kl in per_doc.items()}
    n = len(next(iter(per_doc.values())))
    ops = {spec: {"name": parse_op(spec).name, "family": parse_op(spec).family, "mean_kl": float(np.mean(kl)),
                  "top1_agreement_pct": 90.0, "perplexity": 2.0, "cache_bytes": 1000.0,
                  "per_document": [{"id": f"d{i}", "mean_kl": k} for i, k in enumerate(kl)]}
           for spec, kl in per_doc.items()}
    run = {"prefill": prefill, "decode": decode, "dtype": "float32", "documents": [f"d{i}" for i in range(n)],
           "exact_cache_bytes": 4000.0, "ops": ops, "refused": {}}
    return frontier.analyse(run, config or _config(), parse_ops(list(per_doc)))


def _verdicts(run: dict) -> dict[str, tuple]:
    from kvutils.report.chapter4_tables import frontier_verdicts

    return {spec.split(":")[0]: (t, tie) for _, spec, t, tie in frontier_verdicts(run)}


def test_verdicts_follow_the_interval_shown():
    """Against random eviction, each verdict is the median-difference interval shown beside it: SnapKV
    lower on every document reads below random, K-norm above, SnapKV with noise not separated at
    n = 8; the results carry the documented keys."""
    from kvutils.report.chapter4_tables import frontier_verdict_table

    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.4, 8)
    clear = _run({"random:compression_ratio=0.5,seed=0": list(base), "snapkv:compression_ratio=0.5": list(base * 0.3),
                  "knorm:compression_ratio=0.5": list(base * 1.5)})
    assert len(clear["ops"]["snapkv:compression_ratio=0.5,window=64,kernel=5"]["per_doc_kl"]) == 8
    assert all({"a", "b", "n", "effect", "ci95", "verdict"} <= set(v) for v in clear["verdicts"])
    table = frontier_verdict_table({"m": clear})
    assert table.loc["SnapKV (evicts 50 %)", "verdict"] == "✓ below random"
    assert table.loc["K-norm (evicts 50 %)", "verdict"] == "✗ above random"
    assert table.loc["SnapKV (evicts 50 %)", "documents below / above random"] == "8 / 0 of 8"
    assert report_frontier.kvpress_table({"m": clear}).loc["m at 0.5", "presses worse than random or the window"] \
        .startswith("K-norm (evicts 50 %) vs random")
    noise = _run({"random:compression_ratio=0.5,seed=0": list(base),
                  "snapkv:compression_ratio=0.5": list(base + rng.normal(0, 0.05, 8))})
    test, _ = _verdicts(noise)["snapkv"]
    assert test.verdict == "not separated at n = 8" and test.interval[0] < 0 < test.interval[1]
    assert report_frontier.frontier_notes({"m": noise}) == []  # equal held bytes within the level: no caveat


def test_identical_scores_are_named_by_construction_or_flagged():
    same = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    specs = {"snapkv:compression_ratio=0.5": same, "adakv:compression_ratio=0.5": same,
             "random:compression_ratio=0.5,seed=0": [x + 0.1 for x in same]}
    _, tie = _verdicts(_run(specs, _config(kv_heads=1)))["adakv"]
    assert tie.startswith("= SnapKV (evicts 50 %): the model has one KV head")
    _, tie = _verdicts(_run(specs, _config(kv_heads=2)))["adakv"]
    assert tie == "scored as SnapKV (evicts 50 %) on all 8 documents; no construction explains it"


def test_expected_attention_clause_is_computed():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.4, 8)
    ea_best = _run({"random:compression_ratio=0.5,seed=0": list(base), "expected_attention:compression_ratio=0.5":
                    list(base * 0.2), "snapkv:compression_ratio=0.5": list(base * 0.6)})
    assert report_frontier.kvpress_table({"m": ea_best}).loc["m at 0.5", "Expected Attention"] == "the single best"
    ea_behind = _run({"random:compression_ratio=0.5,seed=0": list(base), "expected_attention:compression_ratio=0.5":
                      list(base * 0.9), "snapkv:compression_ratio=0.5": list(base * 0.2)})
    behind = report_frontier.kvpress_table({"m": ea_behind}).loc["m at 0.5", "Expected Attention"]
    assert behind.startswith("behind SnapKV (evicts 50 %)")
    # a comparison of methods that hold memory carries the bytes both sides hold
    held = {s: report_frontier._held_pct(ea_behind, o) for s, o in ea_behind["ops"].items()}
    ea, snap = (next(v for s, v in held.items() if s.startswith(m)) for m in ("expected_attention", "snapkv"))
    assert f"({report_frontier.fmt(ea, 3)} % against {report_frontier.fmt(snap, 3)} %)" in behind


def test_chart_tells_every_method_and_model_apart():
    """One panel per model (overlaid, two models' lines shared their colours), one colour per method
    and the same on every panel, title inside the figure, text legible at the column."""
    import matplotlib

    matplotlib.use("Agg")
    rng = np.random.default_rng(2)
    specs = frontier.default_specs(1024, 128)
    specs = [s for s in specs if not s.startswith("hf_quantized")]
    runs = {m: _run({s: list(rng.uniform(0.01, 0.5, 8)) for s in specs}) for m in ("model-a", "model-b")}
    for run in runs.values():
        run["ops"]["exact"]["mean_kl"] = 0.0
    fig = report_frontier.plot_frontier(runs)
    methods = {report_frontier.method(s) for s in specs}
    assert [ax.get_title() for ax in fig.axes] == ["model-a", "model-b"]
    colours = [{str(line.get_color()) for line in ax.get_lines()} for ax in fig.axes]
    assert len(colours[0]) == len(methods) and colours[0] == colours[1]  # a colour per method, alike on both panels
    assert figures.illegible_text(fig) == [] and figures.covered_or_clipped(fig) == []
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width  # the title is whole
    chart = report_frontier.frontier_chart(runs)
    traces = chart.figure.to_plotly_json()["data"]
    points = [t for t in traces if not t["name"].startswith("model: ")]
    # the static chart's names and colours
    assert {t["legendgroup"] for t in points} == {method_name(m) for m in methods}
    static = dict(zip([h.get_label() for h in fig.legends[0].legend_handles],
                      [h.get_color() for h in fig.legends[0].legend_handles]))
    assert all(static[t["legendgroup"]] == t["marker"]["color"] for t in points)
    # the legend: one entry per method and one per model's marker, not one per (method, model) pair
    shown = [t["name"] for t in traces if t.get("showlegend", True)]
    assert sorted(shown) == sorted([*map(method_name, methods), "model: model-a", "model: model-b"])
    assert {t["marker"]["symbol"] for t in traces if t["name"].startswith("model: ")} == \
        {t["marker"]["symbol"] for t in points}


def test_chained_ties_sliding_windows_and_unequal_bytes_are_said():
    """pyramidkv ≡ snapkv (fallback) and adakv ≡ snapkv (one KV head) make pyramidkv ≡ adakv by
    construction too; a level whose methods hold different bytes says so; Gemma-like sliding
    layers that the prefill overfills are named."""
    from transformers import Gemma3TextConfig

    same = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]
    run = _run({"snapkv:compression_ratio=0.75": same, "adakv:compression_ratio=0.75": same,
                "pyramidkv:compression_ratio=0.75": same, "random:compression_ratio=0.75": [x + 0.2 for x in same]},
               _config(kv_heads=1))
    ties = {method: tie for method, (_, tie) in _verdicts(run).items()}
    assert "no construction explains it" not in "".join(ties.values())
    assert "AdaKV has no other head" in ties["adakv"] and "PyramidKV falls back" in ties["pyramidkv"]
    assert report_frontier.frontier_notes({"m": run}) == []
    run["ops"]["random:compression_ratio=0.75,seed=0"]["mean_held_bytes"] *= 2
    assert "not the same: a lower KL may come from holding more" in report_frontier.frontier_notes({"m": run})[0]
    gemma = Gemma3TextConfig(num_hidden_layers=6, sliding_window=512, num_key_value_heads=1)
    assert frontier.sliding_note(gemma, 1024) == {"layers": 5, "of": 6, "window": 512}
    assert frontier.sliding_note(gemma, 256) is None and frontier.sliding_note(_config(), 1024) is None
