"""What chapter 3 shows: the sense probes at the old (cached) and a new position and where the new
position's attention goes, beside the article's figures, as tables, per-depth charts and the texts
the prose glues in (every verdict from `kvutils.core.compare`), all built from the results dict of
`kvutils.studies.sense_probes.study`."""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from kvutils.core import compare
from kvutils.core.article import article
from kvutils.core.data import SENSES_PER_WORD
from kvutils.report.figures import depth_fractions, styled
from kvutils.report.findings import Finding, PageFindings, Section, Test, captioned
from kvutils.report.tables import PageTable, rows_table
from kvutils.report.text import fmt


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
            "article": f"{fmt(pythia['old_position_acc_pct_all_depths'])} at all {pythia['n_depths']} depths "
                       "(Pythia)"},
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
        "attention on the old word, largest from layer 5": {
            "article": f"< {fmt(att['to_old_word_below_from_layer_5'])}"},
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
            f"{fmt(distinct[0])} at all {len(old)} depths" if len(distinct) == 1 else ", ".join(map(fmt,
                                                                                                    old)))
        new_ours = p["new_position_pct"]
        peak, where = peak_depths(new_ours)
        rows["(b) new position: embeddings (%)"][col] = fmt(new_ours[0])
        rows["(b) new position: after layer 1 (%)"][col] = fmt(new_ours[1])
        rows["(b) new position: after layer 2 (%)"][col] = fmt(new_ours[2]) if len(new_ours) > 2 else "n/a"
        rows["(b) new position: peak (%) [depths]"][col] = f"{fmt(peak)} {where}"
        att_ours = r["attention"]
        rows["attention on the continuation, range over layers"][col] = (
            f"{fmt(min(att_ours['continuation']), 3)}–{fmt(max(att_ours['continuation']), 3)}")
        rows["attention on the first token, largest"][col] = (f"{fmt(max(att_ours['first_token']), 4)} "
                                                              f"({r['first_token']})")
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
            ax.plot(depth_fractions(p["new_position_pct"]), p["new_position_pct"], marker="o", markersize=3,
                    label=f"(b) {model}: word repeated at a new position")
            ax.plot(depth_fractions(p["old_position_pct"]), p["old_position_pct"], linestyle="--", marker="x",
                    markersize=4,
                    label=f"(a) {model}: old cached position")
        else:
            ax.plot(depth_fractions(p["old_position_pct"]), p["old_position_pct"], marker="s", markersize=3,
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
        ax.stackplot(layers, *[att[key] for key, _ in parts], labels=[label for _, label in parts],
                     alpha=0.85)
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


METHOD = (compare.METHOD + " A probe's accuracy at one depth is tested against chance (50 %) by an exact "
          "sign test over the words (a word's two senses are not independent items), with an interval that "
          "resamples words; \"from depth k on\" is written only when every depth from k to the last is "
          "above chance by that test (tested from the last depth back, so no correction for the number of "
          "depths is owed), and a single depth picked among many is judged at its Holm-adjusted p.")


def setup_text(numbers: dict) -> str:
    probe = next(iter(numbers.values()))["probe"]
    return f"Probe: {probe['distance']} distance over {probe['n_items']} items; models {', '.join(numbers)}."


def depth_rates(probe: dict, where: str) -> list[compare.Rate]:
    """Per depth, the probe's right answers at the `where` ("new" or "old") position against chance
    (one half: two senses). From the per-item outcomes (word-major: a word's two senses side by
    side) the test is clustered by word, since a word's two items are not independent draws (a sign
    test over the words, an interval resampling words); results without them fall back to an exact
    binomial test over the items (the accuracy times the items: the same count)."""
    n = probe["n_items"]
    items = probe.get(f"{where}_position_right")
    if items is not None:
        return [compare.clustered_against_chance([d[i:i + SENSES_PER_WORD] for i in range(0, len(d),
                                                                                          SENSES_PER_WORD)],
                                                 0.5) for d in items]
    return [compare.against_chance(round(pct * n / 100), n, 0.5) for pct in probe[f"{where}_position_pct"]]


def holm_above(rates: list[compare.Rate]) -> list[int]:
    """The depths above chance after Holm's correction for testing every depth (a depth singled out
    among many is judged at its adjusted p)."""
    adjusted = compare.holm([r.p for r in rates])
    return [d for d, (r, p) in enumerate(zip(rates, adjusted)) if p < compare.ALPHA and r.rate > r.chance]


def spans(depths: list[int]) -> str:
    """[1, 2, 3, 7, 8] as '1–3, 7–8'; 'none' for no depth."""
    runs: list[list[int]] = []
    for d in depths:
        if runs and d == runs[-1][-1] + 1:
            runs[-1].append(d)
        else:
            runs.append([d])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs) or "none"


def _rate(r: compare.Rate) -> str:
    lo, hi = r.ci95
    return f"{r.successes} of {r.n} ({100 * r.rate:.0f} % [{100 * lo:.0f}–{100 * hi:.0f}], p = {r.p:.2g})"


def depth_table(numbers: dict) -> PageTable:
    """Where the probe reads the sense, by the test against chance per depth (`depth_rates`): at a causal
    model's new copy of the word, at an encoder's original position. "From depth" only where every
    later depth is above chance too; the depths each above chance on its own test, and those that stay
    above after Holm's correction for testing every depth; the best depth at its Holm-adjusted p."""
    rows = {}
    for model, r in numbers.items():
        where, position = ("new", "new copy") if r["family"] == "causal" else ("old", "original position")
        rates = depth_rates(r["probe"], where)
        start, best = compare.first_from(rates), best_depth(rates)
        weakest = min(rates[start:], key=lambda x: (x.successes, -x.p)) if start is not None else None
        rows[f"{model}, {position} ({len(rates)} depths)"] = {
            "above chance from depth": "no depth" if start is None else str(start),
            "weakest depth from there": _rate(weakest) if weakest else "—",
            "depths above chance, each tested": spans([d for d, x in enumerate(rates) if x.above]),
            "after Holm over every depth": spans(holm_above(rates)),
            "best depth": f"{best.depth}: {best.rate.successes} of {best.rate.n} "
                          f"(Holm p = {best.holm_p:.2g})"}
    return rows_table(rows, "model, position")


def layer_tests(att: dict, a: str, b: str) -> list[compare.Paired] | None:
    """Per layer, share `a` against share `b` of the repeated word's attention, paired over the items
    (None when the results hold no per-item shares)."""
    items = att.get("per_item")
    if items is None:
        return None
    n_layers = len(att[a])
    return [compare.paired([row[layer] for row in items[a]], [row[layer] for row in items[b]], a, b, "items")
            for layer in range(n_layers)]


def layer_count(tests: list[compare.Paired], than: str) -> str:
    """'takes detectably more than … in 12 of 18 layers, detectably less in 2, with no detectable
    difference at n = 32 items in 4'."""
    n = len(tests)
    higher = sum(t.verdict == compare.A_HIGHER for t in tests)
    lower = sum(t.verdict == compare.A_LOWER for t in tests)
    rest = n - higher - lower
    items = tests[0].n if tests else 0
    how_many = "none" if not higher else "every one" if higher == n else str(higher)
    text = f"takes detectably more than {than} in {how_many} of {n} layers"
    if lower:
        text += f", detectably less in {lower}"
    if rest:
        text += (f", with no detectable difference at n = {items} items in {rest}"
                 if compare.can_separate(items) else
                 f", and no verdict is possible at n = {items} items in {rest} (the test needs at least 6)")
    return text


def attention_table(numbers: dict) -> PageTable | None:
    """Where the repeated word looks, by the paired tests per layer: the continuation against the old
    copy of the word, and the first token (the "attention sink") against the continuation."""
    rows = {}
    for model, r in numbers.items():
        if r["family"] != "causal":
            continue
        att = r["attention"]
        cont_vs_old = layer_tests(att, "continuation", "old_word")
        sink_vs_cont = layer_tests(att, "first_token", "continuation")
        rows[model] = {
            "the continuation": layer_count(cont_vs_old, "the old copy of the word") if cont_vs_old else
            "no per-item shares in these results",
            "the first token": f"{r['first_token']!r} " + (layer_count(sink_vs_cont, "the continuation")
                                                          if sink_vs_cont else
                                                          f"takes at most {fmt(max(att['first_token']), 3)}")}
    return rows_table(rows, "model (paired over the items of each layer)") if rows else None


SPLIT_TOLERANCE = 1e-6  # the four attention shares of a layer against 1 (softmax rows, averaged in float64)


def split_check(causal: dict) -> str:
    """Whether the four attention shares, each summed over its own positions, add up to one."""
    parts = ("continuation", "first_token", "old_word", "rest")
    gaps = [abs(sum(r["attention"][p][layer] for p in parts) - 1)
            for r in causal.values() for layer in range(len(r["attention"]["continuation"]))]
    if not gaps:
        return "no causal model run"
    worst = max(gaps, key=lambda g: g if g == g else float("inf"))  # a NaN gap is the worst
    return (f"in this run they add up to one within {SPLIT_TOLERANCE:g} in every layer of every model "
            f"(largest gap {fmt(worst, 2)})" if worst <= SPLIT_TOLERANCE else
            f"in this run they do not add up to one everywhere (largest gap {fmt(worst, 3)}): the spans "
            "overlap or miss positions")


@dataclass(frozen=True)
class BestDepth:
    """The depth with the most right answers (the first such, on a tie) and its test, judged at its
    Holm-adjusted p: a depth singled out among `n_depths` pays for the choice."""

    depth: int
    rate: compare.Rate
    holm_p: float
    n_depths: int

    @property
    def above(self) -> bool:
        return self.holm_p < compare.ALPHA and self.rate.rate > self.rate.chance

    def sentence(self) -> str:
        """'right on 31 of 32 (97 %, 95 % interval 91–100 %; Holm-adjusted p = 0.0012 over 19 depths),
        above chance': the verdict is the adjusted test's."""
        lo, hi = self.rate.ci95
        verdict = ("above chance" if self.above else "no detectable difference from chance at n = "
                                                     f"{self.rate.n}")
        return (f"right on {self.rate.successes} of {self.rate.n} ({100 * self.rate.rate:.0f} %, 95 % "
                f"interval {100 * lo:.0f}–{100 * hi:.0f} %; Holm-adjusted p = {self.holm_p:.2g} over "
                f"{self.n_depths} depths), "
                + verdict)


def best_depth(rates: list[compare.Rate]) -> BestDepth:
    """The one way a best depth is picked and judged, wherever a page picks one (chapter 3, the
    conclusions): the most right answers, Holm-adjusted over every depth tested."""
    adjusted = compare.holm([r.p for r in rates])
    d = max(range(len(rates)), key=lambda i: (rates[i].successes, -i))
    return BestDepth(d, rates[d], adjusted[d], len(rates))


def probe_test(rate: compare.Rate, name: str, p: float | None = None) -> Test:
    """A probe's rate as the `Test` behind a finding: interval in %, p as given (Holm) or its own."""
    return Test(name, rate.n, "items", tuple(100 * v for v in rate.ci95), "%", rate.p if p is None else p)


SIGN_TEST = "sign test"
HOLM_TEST = "Holm sign test"


def chapter3_findings(numbers: dict) -> PageFindings:
    """Chapter 3's answer, box and section points (`kvutils.report.findings`), from the results."""
    causal = {m: r for m, r in numbers.items() if r["family"] == "causal"}
    encoders = {m: r for m, r in numbers.items() if r["family"] == "encoder"}
    old_values = sorted({v for r in causal.values() for v in r["probe"]["old_position_pct"]})
    old = Finding("old", "The cached position cannot carry the sense." if old_values == [50.0] else
                  "The cached position is not at chance everywhere.",
                  "On {models}, the probe scored {values} % at the old position at every depth.",
                  (("models", ", ".join(causal)), ("values", old_values)))
    new = [_new_finding(m, r["probe"]) for m, r in causal.items()]
    enc = [_encoder_finding(m, r["probe"]) for m, r in encoders.items()]
    attention = _attention_finding(causal)
    box = ([old] if causal else []) + new[:2] + enc[:1] + ([attention] if attention else [])
    reads = bool(new) and all(f.claim == "A new copy reads the sense." for f in new)
    answer = Finding("answer", "In later positions." if reads else "Not shown by this run.",
                     "The cached state never changes; a later copy of the word reads the sense from the "
                     "context."
                     if reads else "This run does not show a later copy reading the sense; see the evidence.")
    causal_tables = captioned(("Where attention goes, per layer", attention_table(numbers)))
    return PageFindings(answer, tuple(box[:5]), {
        "probe": Section(new[0] if new else old, tuple([old] + new[1:] + enc), (setup_text(numbers), METHOD),
                         (("The probe against chance, depth by depth", depth_table(numbers)),)),
        "attention": Section(attention or old, (),
                             (f"The four attention shares: {split_check(causal)}.",
                              "The first token is the \"attention sink\" that many models use as a place for "
                              "attention that has nowhere better to go."), causal_tables),
    })



def _new_finding(model: str, probe: dict) -> Finding:
    rates = depth_rates(probe, "new")
    best = best_depth(rates)
    held = holm_above(rates)
    claim = "A new copy reads the sense." if best.above else "A new copy did not read the sense detectably."
    return Finding(f"new_{model}", claim,
                   "{model}: best at depth {depth}, {acc} % right; "
                   "above chance at {held} of {depths} depths.",
                   (("model", model), ("held", len(held)), ("depths", len(rates)), ("depth", best.depth),
                    ("acc", 100 * best.rate.rate)), probe_test(best.rate, HOLM_TEST, best.holm_p))


def _encoder_finding(model: str, probe: dict) -> Finding:
    rates = depth_rates(probe, "old")
    start = compare.first_from(rates)
    weakest = min(rates[start:], key=lambda r: (r.successes,
                                                -r.p)) if start is not None else best_depth(rates).rate
    return Finding(f"encoder_{model}", "An encoder rewrites the old position." if start is not None else
                   "This encoder's old position did not read the sense detectably.",
                   "{model} reads it at the original position from depth {start} on; weakest depth {acc} % "
                   "right.",
                   (("model", model), ("start", start), ("acc", 100 * weakest.rate)), probe_test(weakest,
                                                                                                 SIGN_TEST))


def _attention_finding(causal: dict) -> Finding | None:
    tests = [t for r in causal.values()
             for t in (layer_tests(r["attention"], "continuation", "old_word") or [])]
    if not tests:
        return None
    more = sum(t.verdict == compare.A_HIGHER for t in tests)
    return Finding("attention",
                   "The new copy looks at the continuation, not the old word." if more == len(tests)
                   else "The new copy does not always favour the continuation.",
                   "The continuation took more attention than the old copy in {more} of {layers} layers.",
                   (("more", more), ("layers", len(tests))),
                   Test("paired sign test per layer", tests[0].n, "items"))
