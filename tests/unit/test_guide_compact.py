"""The conclusions' guide a serving engineer reads in a minute, and what carries over to serving (issue
50, items 4 and 5), on the full build's results: one screen of rows, both causal models, the activated
adapter, each row's spec as text; the acceptance command checked against its own parser."""
import gzip
import json

import pytest

from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.paths import REPO_ROOT
from kvutils.report import conclusions_findings as cf
from kvutils.report import guide_compact as gc
from kvutils.report.guide import decision_rows

FULL = REPO_ROOT / "tests" / "data" / "full_build"


@pytest.fixture(scope="module")
def runs() -> dict:
    return {name: json.loads(gzip.open(FULL / f"{name}.json.gz").read()) for name in NOTEBOOKS.values()}


def test_the_compact_guide_is_one_screen_of_both_models(runs):
    guide = gc.compact_guide(runs, 99.0)
    assert len(guide) <= gc.MAX_ROWS and set(guide.models) == {"smollm2-135m", "gemma3-270m"}
    names = [r.name for r in guide.rows]
    activated = next(r for r in guide.rows if r.name.startswith("LoRA switch, activated adapter"))
    assert "accuracy" in activated.top1[0] and "=" in activated.top1[0]
    assert activated.time == "0 at the switch"
    stale = next(r for r in guide.rows if r.name.startswith("LoRA switch, stale cache"))
    assert "AUC" in stale.top1[0]  # the stale cache's AUC beside its accuracy
    assert "transformers fp8 cache" in names  # fp8 where it runs (SmolLM2's frontier)
    families = [r.family for r in guide.rows]
    assert families == sorted(families, key=families.index)  # each family's rows together
    html = guide._repr_html_()
    assert "snapkv:compression_ratio=0.5,window=64,kernel=5</code>" in html  # the spec as text
    assert "title=" not in html  # not a tooltip
    both = next(r for r in guide.rows if r.spec.startswith("snapkv"))
    assert all(c not in ("not run", "—") for c in both.top1 + both.retrieval)


def test_memory_is_against_a_bf16_cache(runs):
    by_spec = {r.spec: r for r in gc.compact_guide(runs, 99.0).rows}
    assert by_spec["cast:dtype=bfloat16"].memory == "100 %"
    assert by_spec["hf_quantized:backend=fp8"].memory == "50 %"
    assert by_spec["random:compression_ratio=0.5,seed=0"].memory == "50 %"  # evicts half, at any precision


def test_a_guide_longer_than_a_screen_is_refused(runs, monkeypatch):
    monkeypatch.setattr(gc, "MAX_ROWS", 3)
    with pytest.raises(ValueError, match="more than one screen"):
        gc.compact_guide(runs, 99.0)


def test_a_model_table_2_did_not_run_gets_the_frontier_rows(runs):
    rows = {r["operation"]: r for r in decision_rows(runs, 99.0, "gemma3-270m")}
    assert "cast:dtype=float16" not in rows and "snapkv:compression_ratio=0.5,window=64,kernel=5" in rows
    assert rows["snapkv:compression_ratio=0.5,window=64,kernel=5"]["setting"].startswith("the frontier")


def test_the_acceptance_command_parses_with_the_acceptance_parser():
    command = cf.acceptance_command()
    assert command.startswith("python -m kvutils.accept --task passkey --model smollm2-135m")
    assert "--context 1024" in command and "--op snapkv:compression_ratio=0.5" in command
    with pytest.raises(SystemExit):
        cf.acceptance_command(("--task", "passkey", "--model", "smollm2-135m", "--contexts", "1024", "--op",
                               "snapkv:compression_ratio=0.5"))  # a misspelt flag
    with pytest.raises(ValueError, match="--task is 'score'"):
        cf.acceptance_command(("--model", "smollm2-135m", "--op", "snapkv:compression_ratio=0.5",
                               "--docs", "pydoc"))


def test_what_carries_over_separates_theorems_measurements_and_limits(runs):
    table = cf.serving_table(runs)
    kinds = table["kind"].tolist()
    assert kinds.count(cf.THEOREM) == 3 and kinds.count(cf.MEASURED) == 2 and kinds.count(cf.NOT_SAID) == 3
    assert "contexts up to 2,048 tokens" in table.loc["costs: time, memory, FLOPs", "rests on"]
    # the Qwen without the LoRA adapters chapter 5 added before recording it (641.9 M with them)
    assert table.loc["8B models", "rests on"] == "largest model here: 630 M parameters"


def test_the_conclusions_box_holds_one_finding_per_question(runs):
    rows = decision_rows(runs, 99.0)
    page = cf.conclusions_findings(runs, rows, "smollm2-135m", 99.0)
    assert [f.key for f in page.box] == ["fp64_decode", "new_gemma3-270m", "rq3", "exact", "activated"]
    rq3 = page.box[2]
    assert rq3.value("n") == rq3.value("near") + rq3.value("costly") + rq3.value("open") + sum(
        r["verdict"].name == "exact" for r in rows if not r["setting"].startswith("chapters 1 and 5"))
    assert set(page.sections) == {"rq1", "rq2", "rq3", "rq4", "guide"}


def test_the_flowchart_is_drawn_offline_with_a_title():
    import matplotlib.pyplot as plt

    fig = gc.plot_flowchart()
    ax = fig.axes[0]
    assert ax.get_title().startswith("Decision flow") and len(ax.texts) >= len(gc.FLOW_BOXES)
    html = gc.Picture(fig, "a flowchart")._repr_html_()
    plt.close(fig)
    assert html.startswith('<img src="data:image/png;base64,') and 'alt="a flowchart"' in html
