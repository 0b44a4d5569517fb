"""Chapter 5 on a checked plan (see `kvutils.studies.qwen3_switch.study.plan`): per model, train
the adapters, switch under every policy, measure what a switch costs and patch the cache."""
from __future__ import annotations

import time

from kvutils.core import checkpoints, results
from kvutils.lora.families import family_of
from kvutils.lora.tails import first_changed_layer
from kvutils.models.loading import load
from kvutils.studies.qwen3_switch import verdicts as switch_verdicts
from kvutils.studies.qwen3_switch.curve import curve_rows
from kvutils.studies.qwen3_switch.exactness import check_exactness
from kvutils.studies.qwen3_switch.policies import exactness, heldout_accuracy, patch_map, switch_costs
from kvutils.studies.qwen3_switch.study import ModelPlan, Plan, plan
from kvutils.studies.qwen3_switch.train import adapter_names, train_all


def run(p: Plan) -> tuple[dict, list[dict]]:
    """Chapter 5 for every model: train the adapters, switch under every policy, measure the cost,
    patch the cache. Returns (numbers per model, described models)."""
    numbers, described = {}, []
    for mp in p.models:
        numbers[mp.name], description = run_model(p, mp)
        described.append(description)
    return numbers, described


def run_model(p: Plan, mp: ModelPlan) -> tuple[dict, dict]:
    """Chapter 5 on one model: (its numbers, the model described). In make book each phase is a
    checkpoint's unit (kvutils.core.checkpoints): a resumed build reads the finished ones back."""
    began = time.perf_counter()
    loaded = load(mp.name, p.dtype, device=p.device)
    pad_id = loaded.tokenizer.pad_token_id or 0
    timings = {}
    model, training = train_all(p, mp, loaded.model, pad_id)
    timings["training_s"] = time.perf_counter() - began
    heldout = checkpoints.stored(f"{mp.name}-heldout", lambda: heldout_accuracy(mp, model, p.device))
    examples = heldout.pop("examples")  # the labels, in the order of every per-example list
    training["zero_shot"]["heldout"] = heldout["base"]["zero_shot"]
    for name, _, activated in adapter_names(mp):
        training["adapters"][name]["heldout"] = heldout[name]["activated" if activated else "tail_patch"]
    exact = checkpoints.stored(f"{mp.name}-exactness", lambda: exactness(mp, model, p.device,
                                                                         p.exact_examples))
    switch = {"heldout": heldout, "heldout_examples": examples, **exact}
    timings["switch_s"] = time.perf_counter() - began - sum(timings.values())
    cost = checkpoints.stored(f"{mp.name}-cost", lambda: switch_costs(mp, model, p.device, p.timing_repeats))
    timings["cost_s"] = time.perf_counter() - began - sum(timings.values())
    patching = checkpoints.stored(f"{mp.name}-patching",
                                  lambda: patch_map(mp, model, p.device, p.patch_layer_groups, p.task))
    timings["patching_s"] = time.perf_counter() - began - sum(timings.values())
    knee = switch_verdicts.knee(heldout, mp.k_values)
    numbers = {
        "task": p.task, "lr": mp.lr, "steps": mp.steps, "train_dtype": p.train_dtype,
        "schedule": p.schedule, "warmup": p.warmup, "loss": p.loss,
        "max_grad_norm": p.max_grad_norm, "layers": mp.n_layers,
        "model_type": mp.model_type, "k_values": mp.k_values,
        "patch_k": mp.patch_k, "hidden_size": loaded.config.hidden_size, "knee_k": knee["knee_k"],
        "knee": knee,
        "first_changed_layer": {str(k): first_changed_layer(mp.n_layers, k, p.targets,
                                                            family_of(mp.model_type))
                                for k in mp.k_values},
        "n_train_examples": len(mp.train), "n_heldout_examples": len(mp.heldout),
        "training": training, "switch": switch, "cost": cost, "patching": patching, "timings": timings}
    numbers["curve"] = curve_rows(numbers)  # the quality-vs-cost chart's data, for other charts
    return numbers, loaded.describe()


def compute(p, folder, unit) -> None:
    """Chapter 5's unit of computation (kvutils.studies.units): every model run, checked for the
    identities that hold by construction (tail patch == recompute, stale only in the tail), written
    to its results file."""
    started = time.time()
    numbers, described = run(plan(p))
    check_exactness(numbers, p.dtype)
    results.save_results(folder, p.NOTEBOOK, p.as_dict(), described, results.as_written(numbers), started)
