"""Chapter 5's Evidence blocks: the run's settings, every adapter's measures, the per-example tests
(McNemar and paired bootstraps over the held-out examples, which treat examples as independent; the
page's verdicts are by document, `kvutils.report.switch_findings`), the tail patch's exactness and its
cost per k, each a table; and the few texts no table holds."""
from __future__ import annotations

from dataclasses import replace

from kvutils.core import compare
from kvutils.lora.switching import nan_max
from kvutils.models.registry import EMBEDDED, TINY
from kvutils.report import switch_verdicts as rsv
from kvutils.report.qwen3_switch import adapter_label
from kvutils.report.tables import PageTable, rows_table, tests_table
from kvutils.report.text import fmt
from kvutils.studies.qwen3_switch import tasks as switch_tasks
from kvutils.studies.qwen3_switch import verdicts as sv
from kvutils.studies.qwen3_switch.study import TOLERANCE


def points(p: compare.Paired) -> compare.Paired:
    """An accuracy difference (0..1) in percentage points."""
    ci95 = None if p.ci95 is None else (100 * p.ci95[0], 100 * p.ci95[1])
    return replace(p, effect=100 * p.effect, ci95=ci95)


def train_dtype_text(numbers: dict, parameters: dict) -> str:
    """How the adapters were trained: one resolved precision per run (see `lora.resolve_train_dtype`)."""
    used = {r["train_dtype"] for r in numbers.values()}
    if used == {"bfloat16"}:
        auto = " — train_dtype \"auto\" chose it: this machine multiplies bfloat16 natively" \
            if parameters.get("train_dtype", "auto") == "auto" else ""
        how = ("bfloat16 autocast (the matrix products in bfloat16; the LoRA weights, their gradients and "
               f"AdamW in float32{auto})")
    else:
        how = " and ".join(sorted(used))
    return f"{how}; every evaluation runs in {parameters['dtype']}"


def what_models_are(names) -> str:
    """What each model of the run is, as the registry describes it (architecture, weights, size)."""
    notes = []
    for name in names:
        if name in EMBEDDED:
            notes.append(f"{name}, {EMBEDDED[name].description}")
        elif name in TINY:
            notes.append(f"{name}, a tiny random {TINY[name].model_type} model (seeded) that only the tests "
                         "use")
        else:
            notes.append(f"{name}, loaded from its own files")
    return "; ".join(notes)


def clipping_text(parameters: dict) -> str:
    """How each step's gradient was bounded (runs before clipping existed record no norm: unclipped)."""
    norm = parameters.get("max_grad_norm", 0)
    return f"each step's gradient scaled down to norm {fmt(norm)} where it was larger" if norm else \
        "the gradient not clipped"


def settings_table(numbers: dict, parameters: dict) -> PageTable:
    """What was trained and scored, one column per model."""
    rows: dict[str, dict[str, str]] = {}
    for model, r in numbers.items():
        for name, value in (
                ("layers L; tails k", f"{r['layers']}; {', '.join(map(str, r['k_values']))}"),
                ("training / held-out examples", f"{r['n_train_examples']} / {r['n_heldout_examples']}"),
                ("LoRA: rank, alpha, targets",
                 f"{parameters['rank']}, {fmt(parameters['alpha'])}, {parameters['targets']}"),
                ("AdamW: steps × examples, learning rate",
                 f"{r.get('steps', parameters['steps'])} × {parameters['batch_size']}, "
                 f"{fmt(r['lr']) if 'lr' in r else parameters['lr']}")):
            rows.setdefault(name, {})[model] = value
    return rows_table(rows, "setting")


def setting_texts(numbers: dict, parameters: dict) -> tuple[str, ...]:
    """The settings that read as sentences: the models, the data, the precision and the marker."""
    task = parameters["task"]
    if task == "senses":
        data = (f"trained on the contexts and reference sentences of the words "
                f"{parameters['train_words'].replace(',', ', ')}; held out: "
                f"{parameters['heldout_words'].replace(',', ', ')}")
    else:
        corpus = repr(parameters["corpus"])
        held = parameters["eval_corpus"] or f"the held-out quarter (every 4th document) of {corpus}"
        data = (f"passages A of {parameters['passage_tokens']} tokens and B of "
                f"{parameters['candidate_tokens']} tokens, trained on documents of {corpus}, scored on "
                f"documents of {held}")
    marker = parameters["marker"] or switch_tasks.MARKERS[task]
    return (f"Models: {what_models_are(numbers)}.", f"Task {task}: {data}.",
            f"Training: {clipping_text(parameters)}; {train_dtype_text(numbers, parameters)}.",
            f"Marker: {marker!r}.")


def _measures(a: dict) -> dict[str, str]:
    low, high = a["ci95_pct"]
    return {"held-out accuracy % [95 % interval]": f"{fmt(a['accuracy_pct'], 3)} [{fmt(low, 3)}–"
                                                  f"{fmt(high, 3)}]",
            "balanced accuracy %": fmt(a["balanced_accuracy_pct"], 3), "AUC": fmt(a["auc"], 3)}


def measures_table(numbers: dict) -> PageTable:
    """The base model zero-shot and every tail (tail patch): held-out measures, how often each gives
    label 0's answer, and each tail's fit (its final training loss, the mean of the last tenth of
    its steps, described: consecutive steps are not independent; and its training-set accuracy)."""
    rows = {}
    for model, r in numbers.items():
        held, labels = r["switch"]["heldout"], r["switch"]["heldout_examples"]["label"]
        adapters = r["training"]["adapters"]
        tails = [(f"{model}: k = {k} tail", held[f"tail{k}"]["tail_patch"], adapters[f"tail{k}"])
                 for k in r["k_values"]]
        for name, a, fit in [(f"{model}: base, zero-shot", held["base"]["zero_shot"], None), *tails]:
            first = int(sum(s > 0 for s in sv.label0_scores(a["logodds_per_example"], labels)))
            losses = fit["losses"][-max(1, len(fit["losses"]) // 10):] if fit else None
            answer = f"gives the first answer ({switch_tasks.ANSWERS[0]!r})" if r["task"] == "continuation" \
                else "gives the first sense's label"
            rows[name] = {**_measures(a), answer: f"{first} of {len(labels)}",
                          "final training loss": fmt(sum(losses) / len(losses), 3) if fit else "—",
                          "training-set accuracy %": fmt(fit["train"]["accuracy_pct"], 3) if fit else "—"}
    return rows_table(rows, "model: adapter")


def _steps(values: dict[int, list[float]], unit: str, what: str, model: str) -> dict[str, compare.Paired]:
    """Each step to the next k on the same units, paired: the trend's tests."""
    ks = sorted(values)
    return {f"{model}: {what}, k = {b} against k = {a}": compare.paired(values[b], values[a], f"k = {b}",
                                                                          f"k = {a}", unit)
            for a, b in zip(ks, ks[1:])}


def example_tests(numbers: dict) -> PageTable:
    """The per-example tests: the base model's AUC against chance; the deepest tail against the base;
    training-set accuracy across k; every smaller k against the best tail; stale reuse and the
    activated adapter against the tail patch of the same k. Accuracy in points."""
    tests: dict[str, compare.Paired] = {}
    for model, r in numbers.items():
        held, labels, ks = r["switch"]["heldout"], r["switch"]["heldout_examples"]["label"], r["k_values"]
        base, deep = held["base"]["zero_shot"], held[f"tail{ks[-1]}"]["tail_patch"]
        tests[f"{model}: the base model's AUC against chance (0.5)"] = sv.auc_vs_chance(base, labels, "base")
        tests[f"{model}: k = {ks[-1]} tail against the base, accuracy"] = points(
            sv.accuracy_pair(deep, base, f"k = {ks[-1]}", "base"))
        tests[f"{model}: k = {ks[-1]} tail against the base, AUC"] = sv.auc_pair(deep, base, labels,
                                                                                 f"k = {ks[-1]}", "base")
        train = {k: r["training"]["adapters"][f"tail{k}"]["train"] for k in ks}
        if all("right_per_example" in a for a in train.values()):
            tests.update({label: points(p) for label, p in _steps(
                {k: [float(x) for x in a["right_per_example"]] for k, a in train.items()},
                "training examples", "training-set accuracy", model).items()})
        for k, d in r["knee"]["vs_best"].items():
            tests[f"{model}: k = {k} against the best tail, accuracy"] = points(compare.Paired.from_dict(d))
        for k in ks:
            patch = held[f"tail{k}"]["tail_patch"]
            for name, a in (("stale reuse", held[f"tail{k}"]["stale"]),
                            ("activated adapter", held[f"activated{k}"]["activated"])):
                tests[f"{model}: k = {k}, {name} against the tail patch, accuracy"] = points(
                    sv.accuracy_pair(a, patch, name.split()[0], "tail patch"))
    return tests_table(tests, "comparison, per example")


def exactness_table(numbers: dict) -> PageTable:
    """Per model and k, what `switch_table` does not show: the largest K/V difference of the tail
    patch, which layers of the base cache stay exact, and the activated adapters' prefix K/V against
    the base's."""
    rows = {}
    for model, r in numbers.items():
        layers, L = r["switch"]["cache_layers"], r["layers"]
        for k in r["k_values"]:
            first = r["first_changed_layer"][str(k)]
            rows[f"{model}, k = {k}"] = {
                "tail patch: largest K/V difference": fmt(nan_max(layers[f"tail{k}"]["tail_patch"]), 3),
                "base cache exact in layers": f"1–{first}" if first else "none",
                "stale in layers": f"{first + 1}–{L}" if first < L else "none",
                "activated: prefix K/V against the base's":
                    fmt(nan_max(layers[f"activated{k}"]["prefix_vs_base"]), 3)}
    return rows_table(rows, "model, k")


def trend_tests(numbers: dict) -> PageTable:
    """Stale reuse's mean KL from the recompute across k, paired over the examples."""
    tests = {}
    for model, r in numbers.items():
        sc = r["switch"]["scores"]
        tests.update(_steps({k: sc[f"tail{k}"]["stale"]["kl_per_example"] for k in r["k_values"]}, "examples",
                            "stale reuse's mean KL (nats)", model))
    return tests_table(tests, "comparison")


def cost_table(numbers: dict) -> PageTable:
    """Per model and k: the tail patch's time and FLOPs as shares of a full recompute, k/L, and the
    time share's excess over k/L (median over repeats)."""
    rows = {}
    for model, r in numbers.items():
        cost, L = r["cost"], r["layers"]
        for k in r["k_values"]:
            c = cost["per_k"][str(k)]
            rows[f"{model}, k = {k} ({cost['prefix_tokens']}-token prefix)"] = {
                "full recompute (ms)": fmt(1000 * c["recompute"]["seconds"], 3),
                "time share": fmt(c["tail_time_fraction"], 3),
                "FLOPs share": fmt(c["tail_flops_fraction"], 3),
                "k/L": fmt(k / L, 3), "time share − k/L": fmt(c["tail_time_fraction"] - k / L, 2)}
    return rows_table(rows, "model, k")


def cost_tests(numbers: dict) -> PageTable:
    """The time share's excess over k/L across k, paired by timed repeat: a fixed cost per forward
    would make it largest at the smallest k."""
    tests = {}
    for model, r in numbers.items():
        per_k, L = r["cost"]["per_k"], r["layers"]
        excess = {k: [t / q - k / L for t, q in zip(per_k[str(k)]["tail_patch"]["seconds_repeats"],
                                                   per_k[str(k)]["recompute"]["seconds_repeats"])]
                  for k in r["k_values"]}
        tests.update(_steps(excess, "repeats", "time share − k/L", model))
    return tests_table(tests, "comparison")


def cost_texts(numbers: dict, parameters: dict) -> tuple[str, ...]:
    """Per model: the memory the tail patch keeps, and where the run's time went."""
    out = []
    for model, r in numbers.items():
        kib, t = r["cost"]["boundary_bytes_per_token"] / 1024, r["timings"]
        out.append(f"{model}: the boundary's hidden states take {fmt(kib, 4)} KiB per token "
                   f"({r['hidden_size']} numbers in {parameters['dtype']}); this run spent "
                   f"{fmt(t['training_s'], 3)} s training, {fmt(t['switch_s'], 3)} s on the switch, "
                   f"{fmt(t['cost_s'], 3)} s on the cost benchmark and {fmt(t['patching_s'], 3)} s patching.")
    return tuple(out)


def chapter5_evidence(numbers: dict, parameters: dict) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple]]:
    """Each section's Evidence block: its texts, and its tables with their captions."""
    dtype = parameters["dtype"]
    texts = {
        "training": setting_texts(numbers, parameters),
        "quality": (f"How each per-example comparison is drawn: {compare.METHOD}",
                    *(f"The knee, per example: {rsv.knee(m, r)}." for m, r in numbers.items())),
        "switch": (f"Every policy against its reference on the first {parameters['exact_examples']} held-out "
                   f"examples; largest allowed difference {fmt(TOLERANCE[dtype])} in {dtype}.",),
        "cost": cost_texts(numbers, parameters),
        "patching": tuple(text for m, r in numbers.items() for text in (
            f"{rsv.patching(m, r, adapter_label(r, r['patching']['adapter']))}.",
            f"Where it reads: {rsv.where(m, r)}.", f"Controls: {rsv.controls(m, r)}.")),
    }
    tables = {
        "training": (("Settings", settings_table(numbers, parameters)),
                     ("Every adapter on the held-out examples, and its fit", measures_table(numbers))),
        "quality": (("Per-example tests (McNemar for accuracy; they treat examples as independent)",
                     example_tests(numbers)),),
        "switch": (("What of the base cache stays exact, per k", exactness_table(numbers)),
                   ("Stale reuse's KL across k, paired over the examples", trend_tests(numbers))),
        "cost": (("The tail patch against a full recompute, per k", cost_table(numbers)),
                 ("Its excess over k/L across k, paired by timed repeat", cost_tests(numbers))),
    }
    return texts, tables
