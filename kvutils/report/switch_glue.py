"""Chapter 5's texts for the prose to glue in (`chapter5_glue`): the run's settings and every finding,
each worded as its numbers say; the clauses that rest on a paired test come from
`kvutils.report.switch_verdicts`."""
from __future__ import annotations

import math

from kvutils.core import compare
from kvutils.lora.switching import nan_max
from kvutils.models.registry import EMBEDDED, TINY
from kvutils.report import switch_verdicts as rsv
from kvutils.report.qwen3_switch import adapter_label
from kvutils.report.text import fmt
from kvutils.studies.qwen3_switch import tasks as switch_tasks
from kvutils.studies.qwen3_switch.study import TOLERANCE


def _stale_layers(n_layers: int, k: int, first: int) -> str:
    """Which layers of the base cache stay exact for a tail of depth k (1-based layer numbers)."""
    if first == 0:
        return "every layer's entries stale"
    if first >= n_layers:
        return "every layer's entries exact"
    def span(a: int, b: int) -> str:
        return f"layer {a}" if a == b else f"layers {a}–{b}"
    return f"{span(1, first)} exact, {span(first + 1, n_layers)} stale"


def _pct(value) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{fmt(value, 4)}%"


def _acc(a: dict) -> str:
    low, high = a["ci95_pct"]
    return f"{fmt(a['accuracy_pct'], 3)}% (95% interval {fmt(low, 3)}–{fmt(high, 3)}%, n = {a['n']})"


def _excess_per_repeat(row: dict, share: float) -> list[float]:
    """Per timed repeat, the tail patch's time as a share of the recompute's, minus k/L."""
    return [t / r - share for t, r in zip(row["tail_patch"]["seconds_repeats"],
                                          row["recompute"]["seconds_repeats"])]


def fit_clause(model: str, training: dict, ks: list[int]) -> str:
    """How well each tail fits its training set: the final loss described (consecutive steps of one
    run are not independent units, so no test is drawn on them), the training-set accuracy tested
    across k on the same training examples (McNemar), where the run kept them."""
    adapters = training["adapters"]
    finals = ", ".join(f"{fmt(_final_loss(adapters[f'tail{k}']['losses']), 3)} (k = {k})" for k in ks)
    text = (f"{model}: training loss at the end (mean of the last tenth of the steps, the same batches for "
            f"every adapter) {finals} — described, not tested, as consecutive steps of one run are not "
            "independent")
    train = {k: adapters[f"tail{k}"]["train"] for k in ks}
    if len(ks) > 1 and all("right_per_example" in a for a in train.values()):
        per_k = {k: [float(x) for x in a["right_per_example"]] for k, a in train.items()}
        word, steps = rsv.tested_trend(per_k, "training examples")
        text += (f"; accuracy on {train[ks[0]]['n']} training examples "
                 + ", ".join(f"{fmt(a['accuracy_pct'], 3)}% (k = {k})" for k, a in train.items())
                 + f", which {word} with k ({steps})")
    return text


def _last_tenth(losses: list[float]) -> list[float]:
    return losses[-max(1, len(losses) // 10):]


def _final_loss(losses: list[float]) -> float:
    tail = _last_tenth(losses)
    return sum(tail) / len(tail)


def _per_model_text(numbers: dict, parameters: dict, key: str) -> str:
    """A per-model setting as the prose says it: one value, or each model's."""
    values = {model: r.get(key, parameters[key]) for model, r in numbers.items()}
    if len(set(values.values())) == 1:
        return fmt(next(iter(values.values())))
    return ", ".join(f"{fmt(value)} for {model}" for model, value in values.items())


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


def chapter5_glue(numbers: dict, parameters: dict) -> dict[str, str]:
    """Every number and every finding the prose cites, as text; each finding's wording follows the
    numbers. One function per clause, each called per model and the models' clauses joined."""
    clauses = {"setup": _setup, "zero_shot": rsv.zero_shot, "deepest": rsv.deepest, "knee": rsv.knee,
               "fit": lambda m, r: fit_clause(m, r["training"], r["k_values"]),
               "stale_acc": lambda m, r: rsv.against_tail(m, r, "tail", "stale", "stale reuse"),
               "activated_acc": lambda m, r: rsv.against_tail(m, r, "activated", "activated",
                                                              "the activated adapter"),
               "exact": _exact, "stale": _stale, "activated": _activated, "cost": _cost,
               "cost_trend": _cost_trend,
               "memory": lambda m,
               r: (f"{m}: {fmt(r['cost']['boundary_bytes_per_token'] / 1024, 4)} KiB per token "
                                       f"({r['hidden_size']} numbers in {parameters['dtype']})"),
               "patching": lambda m, r: rsv.patching(m, r, adapter_label(r, r["patching"]["adapter"])),
               "patch_where": rsv.where, "control": rsv.controls, "timings": _timings}
    return {**settings_glue(numbers, parameters),
            **{key: "; ".join(clause(model, r) for model, r in numbers.items())
               for key, clause in clauses.items()}}


def clipping_text(parameters: dict) -> str:
    """How each step's gradient was bounded (runs before clipping existed record no norm: unclipped)."""
    norm = parameters.get("max_grad_norm", 0)
    return f"each step's gradient scaled down to norm {fmt(norm)} where it was larger" if norm else \
        "the gradient not clipped"


def settings_glue(numbers: dict, parameters: dict) -> dict[str, str]:
    """The chapter's settings and data, as the prose cites them."""
    task = parameters["task"]
    out = {"models": ", ".join(numbers), "steps": _per_model_text(numbers, parameters, "steps"),
           "rank": str(parameters["rank"]),
           "alpha": fmt(parameters["alpha"]), "lr": _per_model_text(numbers, parameters, "lr"),
           "targets": parameters["targets"],
           "batch_size": str(parameters["batch_size"]), "task": task,
           "marker": repr(parameters["marker"] or switch_tasks.MARKERS[task]), "dtype": parameters["dtype"],
           "method": compare.METHOD, "exact_examples": str(parameters["exact_examples"]),
           "tolerance": f"largest allowed difference {fmt(TOLERANCE[parameters['dtype']])} in "
                        f"{parameters['dtype']}",
           "train_dtype": train_dtype_text(numbers, parameters), "what": what_models_are(numbers),
           "clipping": clipping_text(parameters)}
    if task == "senses":
        out["data"] = (f"trained on the contexts and reference sentences of the words "
                       f"{parameters['train_words'].replace(',', ', ')}, "
                       f"held out: {parameters['heldout_words'].replace(',', ', ')}")
    else:
        held = (parameters["eval_corpus"] or "the held-out quarter (every 4th document) of "
                                             f"{parameters['corpus']!r}")
        out["data"] = (f"passages A of {parameters['passage_tokens']} tokens and B of "
                       f"{parameters['candidate_tokens']} tokens, trained on documents of "
                       f"{parameters['corpus']!r}, scored on documents of {held}")
    return out


def _setup(model: str, r: dict) -> str:
    return (f"{model}: L = {r['layers']} layers, k ∈ {{{', '.join(map(str, r['k_values']))}}}, "
            f"{r['n_train_examples']} training and {r['n_heldout_examples']} held-out examples")


def _exact(model: str, r: dict) -> str:
    sc, layers, ks = r["switch"]["scores"], r["switch"]["cache_layers"], r["k_values"]
    return (f"{model}: largest |logit difference| of the tail patch "
            + ", ".join(f"{fmt(sc[f'tail{k}']['tail_patch']['max_abs_logit_diff'], 3)} (k = {k})" for k in ks)
            + "; largest K/V difference "
            + fmt(max(nan_max(layers[f"tail{k}"]["tail_patch"]) for k in ks), 3))


def _stale(model: str, r: dict) -> str:
    sc, ks, L = r["switch"]["scores"], r["k_values"], r["layers"]
    word, steps = rsv.tested_trend({k: sc[f"tail{k}"]["stale"]["kl_per_example"] for k in ks}, "examples")
    return (f"{model}: its mean KL from the recompute {word} with k ({steps}) — " + "; ".join(
        f"k = {k}: max |Δlogit| {fmt(sc[f'tail{k}']['stale']['max_abs_logit_diff'], 3)}, mean KL "
        f"{fmt(sc[f'tail{k}']['stale']['kl_mean'], 3)}, top-1 agreement "
        f"{_pct(sc[f'tail{k}']['stale']['top1_agree_pct'])}; "
        f"{_stale_layers(L, k, r['first_changed_layer'][str(k)])}" for k in ks))


def _activated(model: str, r: dict) -> str:
    sc, layers, ks = r["switch"]["scores"], r["switch"]["cache_layers"], r["k_values"]
    prefix = nan_max(d for k in ks for d in layers[f"activated{k}"]["prefix_vs_base"])
    worst = max(sc[f"activated{k}"]["activated"]["max_abs_logit_diff"] for k in ks)
    return (f"{model}: reusing the whole base cache, the activated adapters are at most {fmt(worst, 3)} from "
            f"one pass over the whole sequence; their prefix K/V differ from the base's by {fmt(prefix, 3)}")


def _cost(model: str, r: dict) -> str:
    cost, ks, L = r["cost"], r["k_values"], r["layers"]
    return (f"{model} ({cost['prefix_tokens']}-token prefix): full recompute "
            f"{fmt(1000 * cost['per_k'][str(ks[0])]['recompute']['seconds'], 3)} ms; tail patch as a share "
            "of it: "
            + ", ".join(f"k = {k}: {fmt(cost['per_k'][str(k)]['tail_time_fraction'], 3)} of the time and "
                        f"{fmt(cost['per_k'][str(k)]['tail_flops_fraction'], 3)} of the FLOPs (k/L = "
                        f"{fmt(k / L, 3)})"
                        for k in ks))


def _cost_trend(model: str, r: dict) -> str:
    cost, ks, L = r["cost"], r["k_values"], r["layers"]
    excess = [cost["per_k"][str(k)]["tail_time_fraction"] - k / L for k in ks]
    shape, steps = rsv.tested_trend({k: _excess_per_repeat(cost["per_k"][str(k)], k / L) for k in ks},
                                    "repeats")
    reading = ("largest at the smallest k, as a fixed cost per forward makes it" if shape == "falls" else
               "the repeats do not show it largest at the smallest k, so this run cannot say whether a fixed "
               "cost per forward dominates it")
    return (f"{model}: the measured share minus k/L {shape} with k (medians "
            + ", ".join(f"{fmt(e, 2)}" for e in excess) + f"; paired by repeat: {steps}): {reading}")


def _timings(model: str, r: dict) -> str:
    t = r["timings"]
    return (f"{model}: training {fmt(t['training_s'], 3)} s, switch {fmt(t['switch_s'], 3)} s, "
            f"cost benchmark {fmt(t['cost_s'], 3)} s, patching {fmt(t['patching_s'], 3)} s")
