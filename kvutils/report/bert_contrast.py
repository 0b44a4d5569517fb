"""What chapter 2 shows: the article's BERT figures beside ours, the per-layer distances between the
two contexts (state and keys) for every model, and the texts the prose glues in, all built from the
results dict of `kvutils.studies.sense_probes.study.run_contrast`."""
from __future__ import annotations

import pandas as pd

from kvutils.core.article import article
from kvutils.report.figures import depth_fractions, styled
from kvutils.report.findings import Finding, PageFindings, Section, Test
from kvutils.report.tables import rows_table
from kvutils.report.text import fmt


def _key_depth(values: list) -> list[float]:
    """Depth of per-layer key entries (layer 1 .. L) on the same axis as `depth_fractions`."""
    n = len(values)
    return [(i + 1) / n for i in range(n)]


def chapter2_table(numbers: dict) -> pd.DataFrame:
    """Metric | article | this run (one column per model)."""
    bert = article()["e2_bert"]
    rows = {
        "cosine distance, embeddings": {"article": "0 (identical, BERT-base)"},
        "cosine distance after layer 1": {
            "article": f"{fmt(bert['cosine_distance']['layer_1'])} (BERT-base)"},
        "cosine distance after the last layer": {"article": f"{fmt(bert['cosine_distance']['layer_12'])} "
                                                            "(BERT-base, layer 12)"},
        "‖ΔK‖/‖K‖ in layer 1": {"article": "not reported"},
        "‖ΔK‖/‖K‖ in layer 2": {"article": f"{fmt(bert['key_relative_diff']['layer_2'])} (BERT-base)"},
        "‖ΔK‖/‖K‖ in the last layer": {"article": f"{fmt(bert['key_relative_diff']['layer_12'])} (BERT-base, "
                                                  "layer 12)"},
        "largest cosine distance, any layer": {
            "article": f"< {fmt(bert['pythia_cosine_distance_bound']['max_below'])} (Pythia)"},
        "largest ‖ΔK‖/‖K‖, any layer": {"article": "not reported"},
        "words with bit-identical states in both contexts": {"article": "not reported"},
    }
    for model, r in numbers.items():
        col = f"this run: {model} ({r['family']}, {r['layers']} layers)"
        dist, keys = r["cosine_distance_mean"], r["key_relative_diff_mean"]
        ours = {
            "cosine distance, embeddings": fmt(dist[0]),
            "cosine distance after layer 1": fmt(dist[1]),
            "cosine distance after the last layer": fmt(dist[-1]),
            "‖ΔK‖/‖K‖ in layer 1": fmt(keys[0]),
            "‖ΔK‖/‖K‖ in layer 2": fmt(keys[1]) if len(keys) > 1 else "n/a",
            "‖ΔK‖/‖K‖ in the last layer": fmt(keys[-1]),
            "largest cosine distance, any layer": fmt(max(r["cosine_distance_max"])),
            "largest ‖ΔK‖/‖K‖, any layer": fmt(max(r["key_relative_diff_max"])),
            "words with bit-identical states in both contexts":
                f"{r['states_bit_identical_words']}/{r['n_words']}",
        }
        for metric, value in ours.items():
            rows[metric][col] = value
    return rows_table(rows)


@styled
def plot_chapter2(numbers: dict):
    """Chart 1: per layer, the word's cosine distance between its two contexts and the prefix's
    relative key difference, causal models against the encoder(s)."""
    import matplotlib.pyplot as plt

    fig, (ax_state, ax_key) = plt.subplots(2, 1, figsize=(7.5, 8.6), sharey=False)
    for model, r in numbers.items():
        style = dict(marker="o", markersize=3, linestyle="--" if r["family"] == "causal" else "-")
        label = f"{model} ({r['family']}, {r['layers']} layers)"
        ax_state.plot(depth_fractions(r["cosine_distance_mean"]), r["cosine_distance_mean"], label=label,
                      **style)
        ax_key.plot(_key_depth(r["key_relative_diff_mean"]), r["key_relative_diff_mean"], label=label,
                    **style)
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
    # below the axes, clear of every point
    ax_key.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    fig.suptitle(f"Same word, two contexts — models: {', '.join(numbers)}")
    fig.tight_layout()
    return fig


def chapter2_glue(numbers: dict, batch_size: int | None = None) -> dict[str, str]:
    """What the numbers of chapter 2's table show, in the words they support: why a causal model's
    zero is exact, and what an encoder's per-layer distances mean for a cache."""
    causal = {m: r for m, r in numbers.items() if r["family"] == "causal"}
    encoders = {m: r for m, r in numbers.items() if r["family"] == "encoder"}
    return {"encoder_reading": "; ".join(_encoder_reading(m, r) for m, r in encoders.items())
                               or "No encoder was run",
            "causal_zero": causal_zero(causal, batch_size)}


def causal_zero(causal: dict, batch_size: int | None) -> str:
    """What an exact 0 between a causal model's two contexts shows. Each word's two contexts are
    consecutive sentences; with an even batch size they share a right-padded batch, so the prefix is
    computed on tensors of the same shape, and the zero is bit equality at equal shapes."""
    if not causal:
        return "No causal model was run"
    same = [m for m, r in causal.items() if r["states_bit_identical_words"] == r["n_words"]]
    paired = batch_size is not None and batch_size % 2 == 0
    how = ("each word's two contexts went through the model side by side in one right-padded batch, so the "
           "word's state was computed by the same kernels on tensors of the same shape: the causal mask kept "
           "the continuation and the padding out of it, and with equal shapes nothing could even change its "
           "rounding"
           if paired else
           "the two contexts of a word did not always share a batch (odd batch_size), so the zero also held "
           "across batches of different widths" if batch_size is not None else
           "how the contexts were batched is not known here")
    shapes = (". So the zero shows bit equality at equal shapes; it does not contradict chapter 1's non-zero "
              "fp32 differences between a prefix computed alone and inside a longer sequence, which are "
              "tensors of different shapes and so can be summed in a different order" if paired else "")
    text = (f"On {', '.join(same)} the word's state was bit-identical in both contexts for every word: "
            f"{how}{shapes}"
            if same else "")
    rest = [f"{m}: {r['states_bit_identical_words']} of {r['n_words']} words bit-identical, largest cosine "
            f"distance {fmt(max(r['cosine_distance_max']))}" for m, r in causal.items() if m not in same]
    if rest:
        text += ("; not" if same else "Not") + " on every causal model (" + "; ".join(rest) + \
            "): a non-zero distance here is not explained by this chapter"
    return text


def _encoder_reading(model: str, r: dict) -> str:
    """What the encoder's per-layer distances show, in the words the numbers support."""
    dist, keys = r["cosine_distance_mean"], r["key_relative_diff_mean"]
    layers = len(dist) - 1
    if dist[0] == 0 and all(d > 0 for d in dist[1:]) and keys[0] == 0 and all(k > 0 for k in keys[1:]):
        return (f"{model}: the embeddings are identical (the same token at the same position); after every "
                f"one of its {layers} layers the state has mixed in the continuation, and so have the keys a "
                "cache would hold from layer 2 on (layer 1's keys are computed from the embeddings). A cache "
                "filled while reading \"The bank\" would be wrong in every layer after the first once the "
                "continuation arrived, and only recomputation would repair it")
    return (f"{model}: the state differed between the two contexts after {sum(d > 0 for d in dist[1:])} of "
            f"its {layers} layers and the prefix's keys in {sum(k > 0 for k in keys)} of {len(keys)} layers "
            f"(at the embeddings: {fmt(dist[0])})")


IDENTITY_TEST = "bit identity"


def chapter2_findings(numbers: dict, batch_size: int | None = None) -> PageFindings:
    """Chapter 2's answer, box and section points (`kvutils.report.findings`), from the results."""
    causal = {m: r for m, r in numbers.items() if r["family"] == "causal"}
    encoders = {m: r for m, r in numbers.items() if r["family"] == "encoder"}
    glue = chapter2_glue(numbers, batch_size)
    box = [_causal_finding(causal)] if causal else []
    for m, r in encoders.items():
        box += _encoder_findings(m, r)
    box = box[:5]
    still = bool(causal) and all(max(r["cosine_distance_max"]) == 0 for r in causal.values())
    moves = bool(encoders) and all(max(r["cosine_distance_mean"][1:]) > 0 for r in encoders.values())
    answer = Finding("answer", "Yes." if still and moves else "Not shown by this run.",
                     "An encoder's cached state would be rewritten by what follows; a causal model's never "
                     "is."
                     if still and moves else "This run does not show both sides of the contrast; see the "
                                             "evidence.")
    evidence = (f"{glue['causal_zero']}.", f"{glue['encoder_reading']}.")
    return PageFindings(answer, tuple(box), {"contexts": Section(box[0], tuple(box[1:]), evidence)})


def _causal_finding(causal: dict) -> Finding:
    same = sum(r["states_bit_identical_words"] for r in causal.values())
    n = sum(r["n_words"] for r in causal.values())
    largest = max(max(r["cosine_distance_max"]) for r in causal.values())
    return Finding("causal", "A causal model's state ignores the continuation." if same == n else
                   "A causal model's state moved with the continuation.",
                   "On {models}, {same} of {n} word states were bit-identical in both contexts; "
                   "largest cosine distance {largest}.",
                   (("models", ", ".join(causal)), ("same", same), ("n", n), ("largest", largest)),
                   Test(IDENTITY_TEST, n, "words"))


def _encoder_findings(model: str, r: dict) -> list[Finding]:
    dist, keys = r["cosine_distance_mean"], r["key_relative_diff_mean"]
    state = Finding(f"{model}_state", "An encoder's state moves." if max(dist[1:]) > 0 else
                    "This encoder's state did not move.",
                    "{model}'s word state differs by {emb} at the embeddings and by {last} after its last "
                    "layer (cosine distance, mean over {n} words).",
                    (("model", model), ("emb", dist[0]), ("last", dist[-1]), ("n", r["n_words"])))
    key = Finding(f"{model}_keys", "So would its cached keys." if max(keys[1:], default=0) > 0 else
                  "Its cached keys did not move.",
                  "The prefix's keys differ by {second} in layer 2 and {last} in the last layer (‖ΔK‖/‖K‖).",
                  (("second", keys[1] if len(keys) > 1 else None), ("last", keys[-1])))
    return [state, key]
