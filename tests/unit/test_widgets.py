"""The attention explorer, driven the way a reader drives it: by setting widget values, then
reading what the view and the figure show (no browser needed)."""
import pytest
import torch

from kvutils.explorer import widgets


@pytest.fixture(scope="module")
def explorer():
    import matplotlib

    matplotlib.use("Agg")
    return widgets.AttentionExplorer(["tiny-llama", "tiny-gemma3"])


def test_default_view_reads_the_repeated_word_over_both_contexts(explorer):
    view = explorer.view
    import json

    from kvutils.core.paths import REPO_ROOT

    bank = next(w for w in json.loads((REPO_ROOT / "data" / "senses.json").read_text())["words"] if w["word"] == "bank")
    first_continuation = bank["senses"][0]["continuation"]
    assert explorer.text_a.value == f"The bank{first_continuation} The bank"
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
    explorer.model.value = "tiny-gemma3"  # the title names it (set here: the test must not rely on an earlier one)
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


# ------------------------------------------------------------------ the book's offline explorer
from kvutils.core import data  # noqa: E402
from kvutils.explorer import data as explorer_data  # noqa: E402
from kvutils.explorer import html as explorer_html  # noqa: E402

# one pair longer than tiny-gemma3's sliding window (16 tokens), so stored rows cross it
LONG_PAIR = data.Word("bank", "The bank", (
    data.Sense("river", " of the wide brown river was muddy and soft after the long heavy storm of last night.", ()),
    data.Sense("finance", " approved the loan.", ())))


@pytest.fixture(scope="module")
def eager():
    import kvutils

    return {name: kvutils.load(name, "float32", attn_implementation="eager") for name in ("tiny-llama", "tiny-gemma3")}


@pytest.fixture(scope="module")
def recorded(eager):
    words = [LONG_PAIR, *data.load_senses()[1:3]]
    parts = [explorer_data.record(loaded, words, explorer_data.CONSTRUCTIONS, progress=False) for loaded in eager.values()]
    return words, explorer_data.pack(parts, explorer_data.CONSTRUCTIONS)


@pytest.mark.parametrize("model", ["tiny-llama", "tiny-gemma3"])
def test_recorded_weights_read_back_as_the_model_computed_them(recorded, eager, model):
    """Every stored matrix, read back as the page reads it, is the model's attention within the
    8-bit rounding (1/510), for every layer, every head and the head mean; the "context" texts,
    stored as the first rows of the "repeat" ones, too. A wrong offset, stride, row order or scale
    would put other weights there."""
    words, payload = recorded
    loaded = eager[model]
    tolerance = 0.5 / explorer_data.LEVELS + 1e-6
    shared = 0
    for word in words:
        for construction, template in explorer_data.CONSTRUCTIONS.items():
            for side, text in enumerate(explorer_data.pair_texts(word, template)):
                maps = explorer_data.attention_maps(loaded, text).maps.double()  # (layers, heads, n, n)
                entry = next(m for m in payload["models"] if m["name"] == model)["pairs"][word.word][construction][side]
                shared += entry["stored_n"] > len(entry["tokens"])
                for layer in range(maps.shape[0]):
                    for head in [None, *range(maps.shape[1])]:
                        got = explorer_data.unpack_matrix(payload, model, word.word, construction, side, layer, head)
                        want = maps[layer].mean(0) if head is None else maps[layer, head]
                        torch.testing.assert_close(got, want, atol=tolerance, rtol=0)
    assert shared == 2 * len(words)  # each "context" text is read from its "repeat" text's rows


def test_recorded_spans_and_tokens_are_those_of_the_live_explorer(recorded):
    _, payload = recorded
    entry = payload["models"][0]["pairs"]["bat"]["repeat"]
    tokens = [[explorer_data.readable(t) for t in side["tokens"]] for side in entry]
    assert [tuple(side["span"]) for side in entry] == list(explorer_data.differing_spans(*tokens))
    assert entry[0]["tokens"][-1].endswith("bat") and entry[0]["text"].endswith(" The bat")


def test_the_same_maps_make_the_same_bytes(recorded, eager):
    words, payload = recorded
    again = explorer_data.pack([explorer_data.record(loaded, words, explorer_data.CONSTRUCTIONS, progress=False)
                                for loaded in eager.values()], explorer_data.CONSTRUCTIONS)
    assert again == payload  # gzip with a fixed mtime: same parameters, same page


def test_the_offline_view_has_the_controls_a_browser_drives(recorded):
    _, payload = recorded
    html = explorer_html.explorer_view(payload, word="bat", layer=99).html
    assert html.count('id="attention-explorer"') == 1
    for name in ("model", "word", "construction", "head"):
        assert f'<select data-control="{name}"' in html
    for name in ("layer", "query"):
        assert f'<input type="range" data-control="{name}"' in html
    assert "http://" not in html and "https://" not in html  # nothing fetched
    data_script = html.split('class="ae-data">')[1].split("</script>")[0]
    assert '"initial":{"model":"tiny-llama","word":"bat","construction":"repeat","layer":99' in data_script
    assert f"{len(payload['blob']) / 1e3:,.0f} kB in this page" in html


@pytest.mark.parametrize("bad, message", [(dict(word="nope"), "word: 'nope'"), (dict(model="gpt2"), "model: 'gpt2'"),
                                          (dict(construction="x"), "construction: 'x'")])
def test_the_offline_view_names_a_bad_choice(recorded, bad, message):
    _, payload = recorded
    with pytest.raises(ValueError, match=message):
        explorer_html.explorer_view(payload, **{"word": "bat", "layer": 1, **bad})


def test_every_label_fits_its_column(explorer):
    """ipywidgets' default label column (80 px) cut "query ← end" to "query ← e…": every labelled
    control shares LABEL_WIDTH, wide enough for its longest label at 0.6em a character (a sans-serif
    font's widest average, arrows included)."""
    controls = explorer.labelled()
    assert {c.style.description_width for c in controls} == {widgets.LABEL_WIDTH}
    longest = max(len(c.description) for c in controls)
    assert explorer.from_end.description == "query ← end"
    assert float(widgets.LABEL_WIDTH.removesuffix("em")) >= 0.6 * longest
