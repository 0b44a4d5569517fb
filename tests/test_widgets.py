"""The attention explorer, driven the way a reader drives it: by setting widget values, then
reading what the view and the figure show (no browser needed)."""
import pytest
import torch

from kvutils import widgets


@pytest.fixture(scope="module")
def explorer():
    import matplotlib

    matplotlib.use("Agg")
    return widgets.AttentionExplorer(["tiny-llama", "tiny-gemma3"])


def test_default_view_reads_the_repeated_word_over_both_contexts(explorer):
    view = explorer.view
    assert explorer.text_a.value.startswith("The bank of the river") and explorer.text_a.value.endswith("The bank")
    for cv in view.contexts:
        assert cv.query == len(cv.tokens) - 1 and cv.tokens[cv.query].endswith("bank")
        assert abs(float(cv.row.sum()) - 1) < 1e-5
        assert cv.row[cv.query + 1:].sum() == 0  # causal: nothing after the query
        start, stop = cv.span  # the continuation differs; the prefix and the final ". The bank" do not
        assert cv.tokens[start - 1].endswith("bank") and stop == len(cv.tokens) - 3


def test_layer_and_head_controls_select_that_slice(explorer):
    explorer.model.value = "tiny-llama"
    explorer.layer.value = 2
    explorer.head.value = 3
    view = explorer.view
    assert (view.layer, view.head) == (1, 3)
    maps = widgets.attention_maps(explorer._loaded_model(), explorer.text_a.value)
    torch.testing.assert_close(view.contexts[0].row, maps.maps[1, 3, -1])
    explorer.head.value = "mean"
    torch.testing.assert_close(explorer.view.contexts[0].row, maps.maps[1, :, -1].mean(0))


def test_switching_model_resets_the_layer_and_head_choices(explorer):
    explorer.model.value = "tiny-gemma3"
    assert explorer.layer.max == 6 and list(explorer.head.options) == ["mean", 0, 1, 2, 3]
    explorer.layer.value = 6
    assert explorer.view.model == "tiny-gemma3" and explorer.view.layer == 5


def test_a_word_pair_and_its_construction_fill_the_texts(explorer):
    explorer.pair.value = "bat"
    explorer.construction.value = "context"
    assert explorer.text_a.value == "The bat flew out of the cave and hunted insects at dusk."
    assert explorer.view.contexts[0].tokens[explorer.view.contexts[0].query] in (".", "▁dusk.", "dusk.")
    explorer.construction.value = "repeat"
    assert explorer.text_b.value.endswith(" The bat")


def test_two_hundred_token_texts_show_a_window_not_a_wall(explorer):
    explorer.pair.value = widgets.CUSTOM
    explorer.window.value = 8
    explorer.text_a.value = "The river bank was muddy. " * 40
    explorer.text_b.value = "The savings bank was closed. " * 40
    view = explorer.view
    for cv in view.contexts:
        assert len(cv.tokens) >= 200 and cv.window.shape == (8, len(cv.tokens))
    explorer.from_end.value = 5
    cv = explorer.view.contexts[0]
    assert cv.query == len(cv.tokens) - 6 and cv.window_start == cv.query - 7
    fig = explorer.figure()
    heat, _, bars, _ = fig.axes[:4]
    assert len(heat.get_xticklabels()) <= 30  # labels thinned out
    bar_rects = bars.containers[0]
    assert len(bar_rects) == len(cv.tokens)
    assert bar_rects[0].get_facecolor()[:3] == pytest.approx((0.839, 0.153, 0.157), abs=1e-2)  # sink in red
    assert "tiny-gemma3" in fig._suptitle.get_text()


def test_differing_spans_find_the_disambiguating_text():
    a = ["The", "bank", "of", "the", "river", ".", "The", "bank"]
    b = ["The", "bank", "approved", "it", ".", "The", "bank"]
    assert widgets.differing_spans(a, b) == ((2, 5), (2, 4))
    assert widgets.differing_spans(a, a) == ((8, 8), (8, 8))
