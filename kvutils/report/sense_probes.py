"""What chapters 2 and 3 show: the article's figures beside ours, the per-layer charts, and the
texts the prose glues in — all built from the results dicts of `senses_study`."""
from __future__ import annotations

import pandas as pd

from kvutils.core import compare
from kvutils.core.article import article
from kvutils.report.common import fmt, rows_table, styled


def _depth(values: list) -> list[float]:
    """Depth of each entry of a per-depth list whose first entry is the embeddings (0) and last the
    final layer (1), so models of 6, 18 and 30 layers share an axis."""
    n = len(values) - 1
    return [i / n for i in range(len(values))]


def _key_depth(values: list) -> list[float]:
    """Depth of per-layer key entries (layer 1 .. L) on the same axis as `_depth`."""
    n = len(values)
    return [(i + 1) / n for i in range(n)]


# --------------------------------------------------------------------------- chapter 2


def chapter2_table(numbers: dict) -> pd.DataFrame:
    """Metric | article | this run (one column per model)."""
    bert = article()["e2_bert"]
    rows = {
        "cosine distance, embeddings": {"article": "0 (identical, BERT-base)"},
        "cosine distance after layer 1": {"article": f"{fmt(bert['cosine_distance']['layer_1'])} (BERT-base)"},
        "cosine distance after the last layer": {"article": f"{fmt(bert['cosine_distance']['layer_12'])} (BERT-base, layer 12)"},
        "‖ΔK‖/‖K‖ in layer 2": {"article": f"{fmt(bert['key_relative_diff']['layer_2'])} (BERT-base)"},
        "‖ΔK‖/‖K‖ in the last layer": {"article": f"{fmt(bert['key_relative_diff']['layer_12'])} (BERT-base, layer 12)"},
        "largest cosine distance, any layer": {
            "article": f"< {fmt(bert['pythia_cosine_distance_bound']['max_below'])} (Pythia)"},
        "words with bit-identical states in both contexts": {"article": "not reported"},
    }
    for model, r in numbers.items():
        col = f"this run: {model} ({r['family']}, {r['layers']} layers)"
        dist, keys = r["cosine_distance_mean"], r["key_relative_diff_mean"]
        ours = {
            "cosine distance, embeddings": fmt(dist[0]),
            "cosine distance after layer 1": fmt(dist[1]),
            "cosine distance after the last layer": fmt(dist[-1]),
            "‖ΔK‖/‖K‖ in layer 2": fmt(keys[1]) if len(keys) > 1 else "n/a",
            "‖ΔK‖/‖K‖ in the last layer": fmt(keys[-1]),
            "largest cosine distance, any layer": fmt(max(r["cosine_distance_max"])),
            "words with bit-identical states in both contexts": f"{r['states_bit_identical_words']}/{r['n_words']}",
        }
        for metric, value in ours.items():
            rows[metric][col] = value
    return rows_table(rows)


@styled
def plot_chapter2(numbers: dict):
    """Chart 1: per layer, the word's cosine distance between its two contexts and the prefix's
    relative key difference, causal models against the encoder(s)."""
    import matplotlib.pyplot as plt

    fig, (ax_state, ax_key) = plt.subplots(2, 1, figsize=(7.5, 8), sharey=False)
    for model, r in numbers.items():
        style = dict(marker="o", markersize=3, linestyle="--" if r["family"] == "causal" else "-")
        label = f"{model} ({r['family']}, {r['layers']} layers)"
        ax_state.plot(_depth(r["cosine_distance_mean"]), r["cosine_distance_mean"], label=label, **style)
        ax_key.plot(_key_depth(r["key_relative_diff_mean"]), r["key_relative_diff_mean"], label=label, **style)
    ax_state.set_title("The word's state: cosine distance between contexts")
    ax_state.set_xlabel("depth (0 = embeddings, 1 = last layer)")
    ax_state.set_ylabel("cosine distance (mean over words, unitless)")
    ax_key.set_title("The prefix's keys: ‖K_a − K_b‖ / ‖K_a‖")
    ax_key.set_xlabel("depth (layer / number of layers)")
    ax_key.set_ylabel("relative key difference (mean over words, unitless)")
    for ax in (ax_state, ax_key):
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(bottom=-0.02)
        ax.grid(alpha=0.3)
    ax_key.legend(loc="upper left")
    fig.suptitle(f"Same word, two contexts — models: {', '.join(numbers)}")
    fig.tight_layout()
    return fig


def chapter2_glue(numbers: dict, batch_size: int | None = None) -> dict[str, str]:
    causal = {m: r for m, r in numbers.items() if r["family"] == "causal"}
    encoders = {m: r for m, r in numbers.items() if r["family"] == "encoder"}
    out = {
        "causal": "; ".join(
            f"{m}: largest cosine distance {fmt(max(r['cosine_distance_max']))}, largest relative key "
            f"difference {fmt(max(r['key_relative_diff_max']))}, states bit-identical for "
            f"{r['states_bit_identical_words']} of {r['n_words']} words" for m, r in causal.items()) or "none run",
        "encoder": "; ".join(
            f"{m}: {fmt(r['cosine_distance_mean'][0])} at the embeddings, {fmt(r['cosine_distance_mean'][1])} "
            f"after layer 1 and {fmt(r['cosine_distance_mean'][-1])} after layer {r['layers']}; relative key "
            f"difference {fmt(r['key_relative_diff_mean'][0])} in layer 1, {fmt(r['key_relative_diff_mean'][1])} "
            f"in layer 2 and {fmt(r['key_relative_diff_mean'][-1])} in layer {r['layers']}"
            for m, r in encoders.items()) or "none run",
        "models": ", ".join(numbers),
        "n_words": str(next(iter(numbers.values()))["n_words"]),
        "encoder_reading": "; ".join(_encoder_reading(m, r) for m, r in encoders.items()) or "No encoder was run",
        "causal_zero": _causal_zero(causal, batch_size),
    }
    return out


def _causal_zero(causal: dict, batch_size: int | None) -> str:
    """What an exact 0 between a causal model's two contexts shows. Each word's two contexts are
    consecutive sentences; with an even batch size they share a right-padded batch, so the prefix is
    computed on tensors of the same shape, and the zero is bit equality at equal shapes."""
    if not causal:
        return "No causal model was run"
    same = [m for m, r in causal.items() if r["states_bit_identical_words"] == r["n_words"]]
    paired = batch_size is not None and batch_size % 2 == 0
    how = ("each word's two contexts went through the model side by side in one right-padded batch, so the word's "
           "state was computed by the same kernels on tensors of the same shape: the causal mask kept the "
           "continuation and the padding out of it, and with equal shapes nothing could even change its rounding"
           if paired else
           "the two contexts of a word did not always share a batch (odd batch_size), so the zero also held across "
           "batches of different widths" if batch_size is not None else
           "how the contexts were batched is not known here")
    shapes = (". So the zero shows bit equality at equal shapes; it does not contradict chapter 1's non-zero fp32 "
              "differences between a prefix computed alone and inside a longer sequence, which are tensors of different "
              "shapes and so can be summed in a different order" if paired else "")
    text = (f"On {', '.join(same)} the word's state was bit-identical in both contexts for every word: {how}{shapes}"
            if same else "")
    rest = [f"{m}: {r['states_bit_identical_words']} of {r['n_words']} words bit-identical, largest cosine distance "
            f"{fmt(max(r['cosine_distance_max']))}" for m, r in causal.items() if m not in same]
    if rest:
        text += ("; not" if same else "Not") + " on every causal model (" + "; ".join(rest) + \
            "): a non-zero distance here is not explained by this chapter"
    return text


def _encoder_reading(model: str, r: dict) -> str:
    """What the encoder's per-layer distances show, in the words the numbers support."""
    dist, keys = r["cosine_distance_mean"], r["key_relative_diff_mean"]
    layers = len(dist) - 1
    if dist[0] == 0 and all(d > 0 for d in dist[1:]) and keys[0] == 0 and all(k > 0 for k in keys[1:]):
        return (f"{model}: the embeddings are identical (the same token at the same position); after every one of its "
                f"{layers} layers the state has mixed in the continuation, and so have the keys a cache would hold "
                "from layer 2 on (layer 1's keys are computed from the embeddings). A cache filled while reading "
                "\"The bank\" would be wrong in every layer after the first once the continuation arrived, and only "
                "recomputation would repair it")
    return (f"{model}: the state differed between the two contexts after {sum(d > 0 for d in dist[1:])} of its "
            f"{layers} layers and the prefix's keys in {sum(k > 0 for k in keys)} of {len(keys)} layers "
            f"(at the embeddings: {fmt(dist[0])})")


# --------------------------------------------------------------------------- chapter 3


def peak_depths(values: list[float]) -> tuple[float, list[int]]:
    """The largest value of a per-depth list and every depth that reaches it."""
    best = max(values)
    return best, [i for i, v in enumerate(values) if v == best]


def first_stays_at(values: list[float], target: float) -> int | None:
    """The first depth from which every later depth is `target`."""
    for i in range(len(values)):
        if all(v == target for v in values[i:]):
            return i
    return None


def chapter3_table(numbers: dict) -> pd.DataFrame:
    a = article()
    pythia, bert, att = a["e3_probe"]["pythia"], a["e3_probe"]["bert"], a["e3_attention"]
    new = pythia["new_position_acc_pct"]
    rows = {
        "(a) old position: accuracy at every depth (%)": {
            "article": f"{fmt(pythia['old_position_acc_pct_all_depths'])} at all {pythia['n_depths']} depths (Pythia)"},
        "(b) new position: embeddings (%)": {"article": fmt(new["embedding"])},
        "(b) new position: after layer 1 (%)": {"article": fmt(new["layer_1"])},
        "(b) new position: after layer 2 (%)": {"article": fmt(new["layer_2"])},
        "(b) new position: peak (%) [depths]": {
            "article": f"{fmt(pythia['new_position_peak_acc_pct'])} {pythia['new_position_peak_layers']}"},
        "(c) encoder, original position: after layer 1 (%)": {
            "article": f"{fmt(bert['old_position_acc_pct_from_layer_1'])} (BERT-base)"},
        "(c) encoder: 100% from depth": {"article": "1 (BERT-base)"},
        "attention on the continuation, range over layers": {
            "article": f"{fmt(att['to_continuation_min'])}–{fmt(att['to_continuation_max'])}"},
        "attention on the first token, largest": {"article": fmt(att["to_first_token_max"])},
        "attention on the old word, layer 2": {"article": fmt(att["to_old_word_layer_2"])},
        "attention on the old word, largest from layer 5": {"article": f"< {fmt(att['to_old_word_below_from_layer_5'])}"},
    }
    for model, r in numbers.items():
        col = f"this run: {model} ({r['family']}, {r['layers']} layers)"
        p = r["probe"]
        old = p["old_position_pct"]
        if r["family"] == "encoder":
            stays = first_stays_at(old, 100.0)
            rows["(c) encoder, original position: after layer 1 (%)"][col] = fmt(old[1])
            rows["(c) encoder: 100% from depth"][col] = "never" if stays is None else str(stays)
            continue
        distinct = sorted(set(old))
        rows["(a) old position: accuracy at every depth (%)"][col] = (
            f"{fmt(distinct[0])} at all {len(old)} depths" if len(distinct) == 1 else ", ".join(map(fmt, old)))
        new_ours = p["new_position_pct"]
        peak, where = peak_depths(new_ours)
        rows["(b) new position: embeddings (%)"][col] = fmt(new_ours[0])
        rows["(b) new position: after layer 1 (%)"][col] = fmt(new_ours[1])
        rows["(b) new position: after layer 2 (%)"][col] = fmt(new_ours[2]) if len(new_ours) > 2 else "n/a"
        rows["(b) new position: peak (%) [depths]"][col] = f"{fmt(peak)} {where}"
        att_ours = r["attention"]
        rows["attention on the continuation, range over layers"][col] = (
            f"{fmt(min(att_ours['continuation']), 3)}–{fmt(max(att_ours['continuation']), 3)}")
        rows["attention on the first token, largest"][col] = f"{fmt(max(att_ours['first_token']), 4)} ({r['first_token']})"
        rows["attention on the old word, layer 2"][col] = (
            fmt(att_ours["old_word"][1], 4) if len(att_ours["old_word"]) > 1 else "n/a")
        late = att_ours["old_word"][4:]
        rows["attention on the old word, largest from layer 5"][col] = fmt(max(late), 4) if late else "n/a"
    return rows_table(rows)


@styled
def plot_chapter3_probe(numbers: dict):
    """Chart 2: sense-probe accuracy per depth at the old position, the new position and the
    encoder's original position, against the 50% chance line."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 6.5))
    for model, r in numbers.items():
        p = r["probe"]
        if r["family"] == "causal":
            ax.plot(_depth(p["new_position_pct"]), p["new_position_pct"], marker="o", markersize=3,
                    label=f"(b) {model}: word repeated at a new position")
            ax.plot(_depth(p["old_position_pct"]), p["old_position_pct"], linestyle="--", marker="x", markersize=4,
                    label=f"(a) {model}: old cached position")
        else:
            ax.plot(_depth(p["old_position_pct"]), p["old_position_pct"], marker="s", markersize=3,
                    label=f"(c) {model}: encoder, original position")
    ax.axhline(50, color="grey", linewidth=1, linestyle=":", label="chance (50%)")
    ax.set_ylim(0, 105)
    ax.set_xlim(-0.02, 1.02)
    ax.set_xlabel("depth (0 = embeddings, 1 = last layer)")
    ax.set_ylabel("sense-probe accuracy (%)")
    distance = next(iter(numbers.values()))["probe"]["distance"]
    ax.set_title(f"Where the sense is readable: nearest-centroid probe\n({distance} distance, "
                 f"{next(iter(numbers.values()))['probe']['n_items']} items) — models: {', '.join(numbers)}")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1, frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


@styled
def plot_chapter3_attention(numbers: dict):
    """Per layer, where the repeated word's attention goes (mean over heads and items), one panel
    per causal model, stacked to 1."""
    import matplotlib.pyplot as plt

    causal = {m: r for m, r in numbers.items() if r["family"] == "causal"}
    fig, axes = plt.subplots(len(causal), 1, figsize=(7.5, 3.4 * len(causal) + 0.8), squeeze=False)
    parts = (("continuation", "the continuation"), ("first_token", "the first token (the sink)"),
             ("old_word", "the old copy of the word"), ("rest", "everything else"))
    for ax, (model, r) in zip(axes[:, 0], causal.items()):
        att = r["attention"]
        layers = list(range(1, len(att["continuation"]) + 1))
        ax.stackplot(layers, *[att[key] for key, _ in parts], labels=[label for _, label in parts], alpha=0.85)
        ax.set_xlim(1, layers[-1])
        ax.xaxis.get_major_locator().set_params(integer=True)  # layers are whole numbers
        ax.set_ylim(0, 1)
        ax.set_xlabel("layer")
        ax.set_ylabel("share of the repeated word's attention")
        ax.set_title(f"{model} (first token: {r['first_token']!r})")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False)
    fig.suptitle("Where the repeated word looks, per layer (mean over heads and items)")
    fig.tight_layout(rect=(0, 0.55 / (3.4 * len(causal) + 0.8), 1, 1))
    return fig


def chapter3_glue(numbers: dict) -> dict[str, str]:
    causal = {m: r for m, r in numbers.items() if r["family"] == "causal"}
    encoders = {m: r for m, r in numbers.items() if r["family"] == "encoder"}
    out = {"models": ", ".join(numbers)}
    out["old"] = "; ".join(
        f"{m}: {', '.join(sorted({fmt(v) for v in r['probe']['old_position_pct']}))}% at all "
        f"{len(r['probe']['old_position_pct'])} depths" for m, r in causal.items()) or "no causal model run"
    out["new"] = "; ".join(
        f"{m}: {fmt(r['probe']['new_position_pct'][1])}% after layer 1, "
        f"peak {fmt(peak_depths(r['probe']['new_position_pct'])[0])}% "
        f"(depths {', '.join(map(str, peak_depths(r['probe']['new_position_pct'])[1]))})"
        for m, r in causal.items()) or "no causal model run"
    out["encoder"] = "; ".join(
        f"{m}: {fmt(r['probe']['old_position_pct'][1])}% after layer 1, "
        + (f"100% from depth {s}" if (s := first_stays_at(r['probe']['old_position_pct'], 100.0)) is not None
           else f"at most {fmt(max(r['probe']['old_position_pct']))}%")
        for m, r in encoders.items()) or "no encoder run"
    out["attention"] = "; ".join(
        f"{m}: {fmt(min(r['attention']['continuation']), 3)}–{fmt(max(r['attention']['continuation']), 3)} on the "
        f"continuation, up to {fmt(max(r['attention']['first_token']), 3)} on the first token ({r['first_token']!r}), "
        f"{fmt(r['attention']['old_word'][1], 3)} on the old word in layer 2 and "
        + (f"at most {fmt(max(r['attention']['old_word'][4:]), 3)} from layer 5" if r["attention"]["old_word"][4:]
           else f"the model has no layer 5 ({len(r['attention']['old_word'])} layers)")
        for m, r in causal.items()) or "no causal model run"
    out["new_reading"] = "; ".join(_new_reading(m, r["probe"]) for m, r in causal.items()) or (
        "no causal model run")
    out["encoder_reading"] = "; ".join(_encoder_probe_reading(m, r["probe"]) for m, r in encoders.items()) or (
        "no encoder run")
    rewrites = encoders and all(any(rate.above for rate in depth_rates(r["probe"], "old")) for r in encoders.values())
    out["encoder_verdict"] = (
        "The encoder rewrites the old position itself — which is exactly why its cache would go stale (chapter 2)"
        if rewrites else "In this run the probe does not read the sense above chance at the encoder's original position "
        "on every encoder, so this run does not show the encoder rewriting it")
    out["attention_reading"] = "; ".join(_attention_reading(m, r) for m, r in causal.items()) or "no causal model run"
    out["split_check"] = _split_check(causal)
    distance = next(iter(numbers.values()))["probe"]["distance"]
    out["distance"] = distance
    n_items = next(iter(numbers.values()))["probe"]["n_items"]
    out["n_items"] = str(n_items)
    out["step"] = fmt(100 / n_items)
    out["method"] = (compare.METHOD + " A probe's accuracy at one depth is tested against chance (50 %) with an "
                     "exact binomial test over its items, and \"from depth k on\" is written only when every depth "
                     "from k to the last is above chance by that test.")
    return out


def depth_rates(probe: dict, where: str) -> list[compare.Rate]:
    """Per depth, the probe's right answers at the `where` ("new" or "old") position against chance
    (one half: two senses), from the per-item outcomes (or, in results without them, the accuracy
    times the items: the same count)."""
    n = probe["n_items"]
    items = probe.get(f"{where}_position_right")
    counts = ([sum(d) for d in items] if items is not None else
              [round(pct * n / 100) for pct in probe[f"{where}_position_pct"]])
    return [compare.against_chance(k, n, 0.5) for k in counts]


def _depths(depths: list[int]) -> str:
    return ", ".join(map(str, depths))


def _above_chance(rates: list[compare.Rate], subject: str) -> str:
    """Where the probe reads above chance, in the words the tests support."""
    n = rates[0].n
    start = compare.first_from(rates)
    above = [d for d, r in enumerate(rates) if r.above]
    if start is not None:
        weakest = min(rates[start:], key=lambda r: (r.successes, -r.p))
        earlier = [d for d in above if d < start]
        also = (f"; before that, depth{'s' if len(earlier) > 1 else ''} {_depths(earlier)} above chance too, but not "
                "every depth between" if earlier else "")
        return (f"from depth {start} on {subject} (every depth from {start} is above chance at n = {n} items; the "
                f"weakest: {weakest.sentence()}{also})")
    best = max(range(len(rates)), key=lambda d: rates[d].successes)
    if above:
        return (f"it is above chance at depth{'s' if len(above) > 1 else ''} {_depths(above)} but not at every later "
                f"depth, so this run does not show it from one depth on (n = {n} items per depth)")
    return (f"no depth shows a detectable difference from chance at n = {n} items (the most: depth {best}, "
            f"{rates[best].sentence()})")


def _new_reading(model: str, probe: dict) -> str:
    """(b) at the repeated word: where the probe starts and from which depth, by the test, it reads the sense."""
    new = probe["new_position_pct"]
    start = "is just the token again" if new[0] == 50 else f"already reads {fmt(new[0])}%"
    return (f"{model}: at the embeddings the repeated word {start} ({fmt(new[0])}%); "
            + _above_chance(depth_rates(probe, "new"), "its state carries the sense the continuation implies"))


def _encoder_probe_reading(model: str, probe: dict) -> str:
    """(c) the encoder's original position, tested against chance per depth."""
    return f"{model}: " + _above_chance(depth_rates(probe, "old"), "the probe reads the sense at its original position")


def layer_tests(att: dict, a: str, b: str) -> list[compare.Paired] | None:
    """Per layer, share `a` against share `b` of the repeated word's attention, paired over the items
    (None when the results hold no per-item shares)."""
    items = att.get("per_item")
    if items is None:
        return None
    n_layers = len(att[a])
    return [compare.paired([row[layer] for row in items[a]], [row[layer] for row in items[b]], a, b, "items")
            for layer in range(n_layers)]


def _layer_count(tests: list[compare.Paired], than: str) -> str:
    """'takes detectably more than … in 12 of 18 layers, detectably less in 2, with no detectable
    difference at n = 32 items in 4'."""
    n = len(tests)
    higher = sum(t.verdict == compare.A_HIGHER for t in tests)
    lower = sum(t.verdict == compare.A_LOWER for t in tests)
    rest = n - higher - lower
    items = tests[0].n if tests else 0
    text = (f"takes detectably more than {than} in {'every one' if higher == n else higher} of {n} layers"
            if higher else f"takes detectably more than {than} in none of {n} layers")
    if lower:
        text += f", detectably less in {lower}"
    if rest:
        text += f", with no detectable difference at n = {items} items in {rest}"
    return text


def _attention_reading(model: str, r: dict) -> str:
    """Where the repeated word looks, in the words the paired tests per layer support: the continuation
    against the old copy of the word, and the first token (the sink) against the continuation."""
    att = r["attention"]
    sink = (f"the first token ({r['first_token']!r}), the \"attention sink\" that many models use as a place for "
            "attention that has nowhere better to go")
    cont_vs_old, sink_vs_cont = layer_tests(att, "continuation", "old_word"), layer_tests(att, "first_token", "continuation")
    if cont_vs_old is None or sink_vs_cont is None:
        return (f"{model}: these results hold no per-item attention shares, so no layer's shares are compared; "
                f"{sink} takes at most {fmt(max(att['first_token']), 3)}")
    return (f"{model}: paired over the items of each layer, the continuation "
            + _layer_count(cont_vs_old, "the old copy of the word") + f"; {sink}, "
            + _layer_count(sink_vs_cont, "the continuation"))


SPLIT_TOLERANCE = 1e-6  # the four attention shares of a layer against 1 (softmax rows, averaged in float64)


def _split_check(causal: dict) -> str:
    """Whether the four attention shares, each summed over its own positions, add up to one."""
    gaps = [abs(sum(r["attention"][p][layer] for p in ("continuation", "first_token", "old_word", "rest")) - 1)
            for r in causal.values() for layer in range(len(r["attention"]["continuation"]))]
    if not gaps:
        return "no causal model run"
    worst = max(gaps, key=lambda g: g if g == g else float("inf"))  # a NaN gap is the worst
    return (f"in this run they add up to one within {SPLIT_TOLERANCE:g} in every layer of every model (largest gap "
            f"{fmt(worst, 2)})" if worst <= SPLIT_TOLERANCE else
            f"in this run they do not add up to one everywhere (largest gap {fmt(worst, 3)}): the spans overlap or miss "
            "positions")
