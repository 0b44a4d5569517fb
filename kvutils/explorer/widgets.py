"""The attention explorer: where one query token of a causal model looks, in two contexts side by
side.

Pick a model, a sentence pair (an ambiguous word of `senses.json`, in the repeat construction or
alone, or any two texts typed in), a layer and a head (or the mean over heads), and a query token
counted back from the end of each text. Each context shows

- a heat map of a small window of query rows (the chosen one and those just before it) over the
  whole context, so a 200-token input stays readable instead of a 200 × 200 wall;
- a bar chart of the chosen query's attention over every earlier token,

with the span where the two texts differ (the disambiguating text) shaded and the first token
(where attention sinks) marked. In live Jupyter `explorer.widget()` gives the controls; in the
static book `explorer.figure()` renders the current view.

The computation (`attention_maps`, `compute_view`, in `kvutils.explorer.data`, which also records
the book's offline explorer) and the drawing (`draw`) are plain functions, so tests drive the
explorer by setting widget values and reading `explorer.view`.
"""
from __future__ import annotations

from collections.abc import Callable

from kvutils.core import data
from kvutils.explorer.data import (  # noqa: F401
    CONSTRUCTIONS,
    AttentionMaps,
    ContextView,
    View,
    attention_maps,
    compute_view,
    differing_spans,
    pair_texts,
    readable,
)
from kvutils.models.loading import Loaded, load

CUSTOM = "(type two texts)"
# every control's label column: "query ← end" (11 characters) needs about 6.5em of a sans-serif font
LABEL_WIDTH = "8em"


def _tick_labels(tokens: list[str], span: tuple[int, int], limit: int = 40) -> tuple[list[int], list[str]]:
    """Every token when there are few; otherwise the first, the span's ends and a regular sample."""
    if len(tokens) <= limit:
        ticks = list(range(len(tokens)))
    else:
        step = max(len(tokens) // 20, 1)
        ticks = sorted({0, span[0], max(span[1] - 1, 0), len(tokens) - 1, *range(0, len(tokens), step)})
    return ticks, [readable(tokens[i]) for i in ticks]


def draw(view: View, titles: tuple[str, str] = ("context A", "context B")):
    """Heat map (window of query rows) and bar chart (the chosen query) for both contexts."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fig, axes = plt.subplots(2, 2, figsize=(12, 6.5), gridspec_kw={"height_ratios": [1, 1.2]})
    head = "mean over heads" if view.head is None else f"head {view.head}"
    for col, (cv, title) in enumerate(zip(view.contexts, titles)):
        ticks, labels = _tick_labels(cv.tokens, cv.span)
        heat, bars = axes[0, col], axes[1, col]
        sns.heatmap(cv.window.numpy(), ax=heat, cmap="viridis", vmin=0, cbar=col == 1,
                    cbar_kws={"label": "attention weight"} if col == 1 else None,
                    yticklabels=[readable(cv.tokens[i]) for i in range(cv.window_start, cv.query + 1)])
        heat.set_xticks([t + 0.5 for t in ticks], labels, rotation=90, fontsize=7)
        heat.tick_params(axis="y", labelsize=7, rotation=0)
        heat.set_xlabel("key token (context position)")
        heat.set_ylabel("query token")
        heat.set_title(f"{title}: queries {cv.window_start}–{cv.query}", fontsize=9)
        colours = ["tab:red" if i == 0 else "tab:orange" if cv.span[0] <= i < cv.span[1] else "tab:blue"
                   for i in range(len(cv.tokens))]
        bars.bar(range(len(cv.tokens)), cv.row.numpy(), color=colours, width=0.85)
        bars.axvspan(cv.span[0] - 0.5, cv.span[1] - 0.5, color="tab:orange", alpha=0.12)
        bars.set_xticks(ticks, labels, rotation=90, fontsize=7)
        bars.set_xlim(-0.5, len(cv.tokens) - 0.5)
        bars.set_ylim(0, max(float(cv.row.max()) * 1.15, 0.05))
        bars.set_xlabel("key token (orange: where the texts differ; red: first token, the sink)")
        bars.set_ylabel("attention weight")
        bars.set_title(f"query {readable(cv.tokens[cv.query])!r} (token {cv.query}): "
                       f"{float(cv.row[cv.span[0]:cv.span[1]].sum()):.3f} on the differing span, "
                       f"{float(cv.row[0]):.3f} on the first token", fontsize=9)
    fig.suptitle(f"Attention of one query token — {view.model}, layer {view.layer + 1}, {head}", fontsize=11)
    fig.tight_layout()
    return fig


def _short(text: str, limit: int = 36) -> str:
    return repr(text if len(text) <= limit else "…" + text[-limit:])


class AttentionExplorer:
    """Interactive explorer: `AttentionExplorer(["smollm2-135m"]).widget()` in Jupyter."""

    def __init__(self, models: list[str], senses_file: str = data.DEFAULT_SENSES, device: str = "cpu",
                 loader: Callable[..., Loaded] = load):
        import ipywidgets as w

        self._device, self._loader = device, loader
        self._loaded: dict[str, Loaded] = {}
        self._maps: dict[tuple[str, str], AttentionMaps] = {}
        self.words = {word.word: word for word in data.load_senses(senses_file)}
        self.model = w.Dropdown(options=models, value=models[0], description="model")
        self.pair = w.Dropdown(options=[*self.words, CUSTOM], value=next(iter(self.words)),
                               description="word")
        self.construction = w.ToggleButtons(options=list(CONSTRUCTIONS), value="repeat", description="text",
                                            tooltips=["the word repeated after the continuation",
                                                      "prefix + continuation only"])
        self.text_a = w.Textarea(description="text A", layout=w.Layout(width="48%"))
        self.text_b = w.Textarea(description="text B", layout=w.Layout(width="48%"))
        self.layer = w.IntSlider(min=1, max=1, value=1, description="layer")
        self.head = w.Dropdown(options=["mean"], value="mean", description="head")
        self.from_end = w.IntSlider(min=0, max=0, value=0, description="query ← end")
        self.window = w.IntSlider(min=1, max=32, value=8, description="rows shown")
        for control in self.labelled():  # ipywidgets' default label width cuts "query ← end" to "query ← e…"
            control.style.description_width = LABEL_WIDTH
        self.output = w.Output()
        self.view: View | None = None
        self._updating = False  # set while the texts are filled from a word, to redraw once
        self._fill_texts()
        self._configure_model()
        for control in (self.pair, self.construction):
            control.observe(lambda _change: self._fill_texts(), names="value")
        self.model.observe(lambda _change: self._configure_model(), names="value")
        for control in (self.model, self.pair, self.construction, self.text_a, self.text_b, self.layer,
                        self.head, self.from_end, self.window):
            control.observe(lambda _change: self.update(), names="value")
        self.update()

    def labelled(self) -> list:
        """The controls with a label (ipywidgets' `description`), which LABEL_WIDTH must hold."""
        return [self.model, self.pair, self.construction, self.text_a, self.text_b, self.layer, self.head,
                self.from_end, self.window]

    # ---------------------------------------------------------------- state
    def _fill_texts(self) -> None:
        if self.pair.value == CUSTOM:
            return
        texts = pair_texts(self.words[self.pair.value], CONSTRUCTIONS[self.construction.value])
        self._updating = True
        self.text_a.value, self.text_b.value = texts
        self._updating = False

    def _loaded_model(self) -> Loaded:
        name = self.model.value
        if name not in self._loaded:
            self._loaded[name] = self._loader(name, "float32", device=self._device,
                                              attn_implementation="eager")
        return self._loaded[name]

    def _configure_model(self) -> None:
        loaded = self._loaded_model()
        self.layer.max = loaded.n_layers
        self.head.options = ["mean", *range(loaded.config.num_attention_heads)]

    def _attention(self, text: str) -> AttentionMaps:
        key = (self.model.value, text)
        if key not in self._maps:
            self._maps[key] = attention_maps(self._loaded_model(), text)
        return self._maps[key]

    def update(self) -> View | None:
        """Recompute the view from the controls and redraw it in the output area."""
        if self._updating or not self.text_a.value.strip() or not self.text_b.value.strip():
            return self.view
        maps = (self._attention(self.text_a.value), self._attention(self.text_b.value))
        self.from_end.max = min(len(m.tokens) for m in maps) - 1
        head = None if self.head.value == "mean" else int(self.head.value)
        self.view = compute_view(self.model.value, maps, self.layer.value - 1, head, self.from_end.value,
                                 self.window.value)
        self._redraw()
        return self.view

    def _redraw(self) -> None:
        import matplotlib.pyplot as plt
        from IPython.display import display

        fig = self.figure()
        self.output.clear_output(wait=True)
        with self.output:
            display(fig)
        plt.close(fig)

    def figure(self):
        """The current view as a matplotlib figure (what the static book shows)."""
        return draw(self.view, titles=(f"A: {_short(self.text_a.value)}", f"B: {_short(self.text_b.value)}"))

    def widget(self):
        """The controls and the output area, for live Jupyter."""
        import ipywidgets as w

        return w.VBox([w.HBox([self.model, self.pair, self.construction]), w.HBox([self.text_a, self.text_b]),
                       w.HBox([self.layer, self.head]), w.HBox([self.from_end, self.window]), self.output])
