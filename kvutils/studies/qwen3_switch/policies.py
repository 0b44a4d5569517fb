"""Chapter 5's measurements once the adapters are trained: held-out accuracy under each switch
policy, each policy against its reference, what a switch costs, and the patching map. Each takes a
`kvutils.studies.qwen3_switch.study.ModelPlan` and the peft model that holds every adapter."""
from __future__ import annotations

import math
import statistics
import time
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from kvutils.core import cores
from kvutils.lora.boundary import copy_cache, new_cache
from kvutils.lora.patching import answer_map, runs
from kvutils.lora.switching import (
    answer_logits,
    base_prefill,
    compare_logits,
    layer_differences,
    nan_max,
    switch_cache,
)
from kvutils.studies.qwen3_switch.tasks import CONTINUATION_BINS, CONTROL_BINS
from kvutils.studies.qwen3_switch.verdicts import auc, balanced_accuracy

if TYPE_CHECKING:
    from kvutils.studies.qwen3_switch.study import ModelPlan
    from kvutils.studies.qwen3_switch.tasks import Example

EVAL_BATCH = 32


def binomial_interval(right: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson's 95 % interval of a proportion right/n, in % (better than the normal one near 0 or 100 %)."""
    if n == 0:
        return math.nan, math.nan
    p = right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def scored(right: list[bool]) -> dict:
    """Accuracy of a list of right/wrong answers: %, n, and the 95 % interval."""
    n, k = len(right), sum(right)
    low, high = binomial_interval(k, n)
    return {"accuracy_pct": 100 * k / n if n else math.nan, "n": n, "right": k, "ci95_pct": [low, high]}


# --------------------------------------------------------------------------- the switch policies


def by_length(examples: list[Example], m: int) -> list[list[Example]]:
    """Examples grouped by prefix length, so each group runs as unpadded batches (a small model
    on a CPU pays per forward, nearly whatever the batch)."""
    groups: dict[int, list[Example]] = {}
    for e in examples:
        groups.setdefault(len(e.ids) - m, []).append(e)
    return [groups[n][a:a + EVAL_BATCH] for n in sorted(groups) for a in range(0, len(groups[n]), EVAL_BATCH)]


def _logodds(logits: torch.Tensor, group: list[Example]) -> list[float]:
    """Per example, the right answer's logit minus the wrong one's (> 0: right)."""
    return [(logits[i, e.target] - logits[i, e.other]).item() for i, e in enumerate(group)]


@torch.no_grad()
def heldout_accuracy(mp: ModelPlan, model, device: str) -> dict:
    """Every held-out example as a server would run it: the base model prefills the prefix, then the
    switch. Per policy and adapter, the answers' accuracy: the base model (zero-shot), each tail with
    the tail patch (== a full recompute, see `exactness`) and with stale reuse of the base cache,
    each activated adapter reusing the base cache (its own, exact, semantics)."""
    m = len(mp.marker_ids)
    starts = sorted({mp.n_layers - k for k in mp.k_values})
    logodds: dict[tuple[str, str], list[float]] = {}
    order: list[Example] = []  # the examples in the order their answers are stored
    for group in tqdm(by_length(mp.heldout, m), desc=f"{mp.name} held-out switch", unit="batch"):
        cores.share()  # in make book, the cores other jobs have freed
        ids = torch.tensor([e.ids[:-m] for e in group], device=device)  # (batch, prefix)
        marker = torch.tensor([mp.marker_ids] * len(group), device=device)  # (batch, m)
        pre = base_prefill(model, ids, starts)
        answers = {("base", "zero_shot"): answer_logits(model, None, copy_cache(pre.kv), marker)}
        for k in mp.k_values:
            patch = switch_cache(model, "tail_patch", pre, ids, f"tail{k}", k)
            answers[(f"tail{k}", "tail_patch")] = answer_logits(model, f"tail{k}", patch, marker)
            answers[(f"tail{k}", "stale")] = answer_logits(model, f"tail{k}", copy_cache(pre.kv), marker)
            answers[(f"activated{k}", "activated")] = answer_logits(model, f"activated{k}",
                                                                    copy_cache(pre.kv), marker)
        order += group
        for key, logits in answers.items():
            logodds.setdefault(key, []).extend(_logodds(logits, group))
    labels = [e.label for e in order]
    out: dict = {"examples": {"label": labels, "group": [e.group for e in order]}}
    for (adapter, policy), values in logodds.items():
        out.setdefault(adapter, {})[policy] = {**scored([v > 0 for v in values]),
                                               **per_example(values, labels)}
    return out


def per_example(logodds: list[float], labels: list[int]) -> dict:
    """What every comparison of chapter 5 is recomputed from: per held-out example (in the order of
    `heldout["examples"]`), right or wrong and the answer's log-odds; with two measures the base
    model's preference for one answer cannot fake: balanced accuracy (the mean of the two labels'
    accuracies) and the AUC of the label-0 log-odds (see `kvutils.studies.qwen3_switch.verdicts`)."""
    right = [v > 0 for v in logodds]
    return {"right_per_example": [int(r) for r in right], "logodds_per_example": logodds,
            "balanced_accuracy_pct": 100 * balanced_accuracy(right, labels),
            "auc": auc(logodds, labels)}


class _Scores:
    """Per (adapter, policy): each example's gap to the reference."""

    def __init__(self):
        self.rows: dict[tuple[str, str], list[dict]] = {}

    def add(self, adapter: str, policy: str, logits: torch.Tensor, reference: torch.Tensor,
            examples: list[Example]) -> None:
        """`logits` and `reference`: (batch, vocab), one row per example."""
        gap = compare_logits(reference, logits)
        for i, e in enumerate(examples):
            self.rows.setdefault((adapter, policy), []).append({
                "max_abs_logit_diff": gap["max_abs_logit_diff"][i].item(), "kl": gap["kl"][i].item(),
                "top1_agree": bool(gap["top1_agree"][i]),
                "right": bool(logits[i, e.target] > logits[i, e.other])})

    def summary(self) -> dict:
        out: dict = {}
        for (adapter, policy), rows in self.rows.items():
            out.setdefault(adapter, {})[policy] = {
                "max_abs_logit_diff": nan_max(r["max_abs_logit_diff"] for r in rows),
                "kl_mean": statistics.fmean(r["kl"] for r in rows), "kl_max": nan_max(r["kl"] for r in rows),
                "top1_agree_pct": 100 * statistics.fmean(r["top1_agree"] for r in rows),
                "accuracy_pct": 100 * statistics.fmean(r["right"] for r in rows), "n": len(rows),
                "kl_per_example": [r["kl"] for r in rows]}
        return out


def _max_layers(current: list | None, new: list) -> list:
    """Element-wise max of two per-layer lists: None (a layer not compared) yields to a number, NaN wins."""
    if current is None:
        return new
    return [nan_max([a, b]) for a, b in zip(current, new)]


@torch.no_grad()
def exactness(mp: ModelPlan, model, device: str, n: int) -> dict:
    """The first `n` held-out examples, each policy against its reference: the logits' gap, and per
    layer how far each policy's cache is from the full recompute under the adapter."""
    m = len(mp.marker_ids)
    starts = sorted({mp.n_layers - k for k in mp.k_values})
    scores, layers = _Scores(), {}

    def track(key, values):
        layers[key] = _max_layers(layers.get(key), values)

    chosen = mp.heldout[:n]
    for group in tqdm(by_length(chosen, m), desc=f"{mp.name} switch exactness", unit="batch"):
        ids = torch.tensor([e.ids[:-m] for e in group], device=device)  # (batch, prefix)
        marker = torch.tensor([mp.marker_ids] * len(group), device=device)  # (batch, m)
        pre = base_prefill(model, ids, starts)
        for k in mp.k_values:
            adapter = f"tail{k}"
            caches = {p: switch_cache(model, p, pre, ids, adapter, k) for p in ("recompute", "stale",
                                                                                "tail_patch")}
            logits = {p: answer_logits(model, adapter, copy_cache(c), marker) for p, c in caches.items()}
            for policy, value in logits.items():
                scores.add(adapter, policy, value, logits["recompute"], group)
            for policy in ("stale", "tail_patch"):
                track((adapter, policy), layer_differences(caches[policy], caches["recompute"], pre.length))
        # each activated adapter: the base cache reused whole, against one pass over the whole sequence
        whole = torch.cat([ids, marker], -1)
        base_pass = new_cache(model)
        answer_logits(model, None, base_pass, whole)
        for k in mp.k_values:
            name, cache = f"activated{k}", new_cache(model)
            one_pass = answer_logits(model, name, cache, whole)
            scores.add(name, "activated", answer_logits(model, name, copy_cache(pre.kv), marker),
                       one_pass, group)
            track((name, "prefix_vs_base"), layer_differences(base_pass, cache, pre.length))
    cache_layers: dict = {}
    for (adapter, what), values in layers.items():
        cache_layers.setdefault(adapter, {})[what] = values
    return {"scores": scores.summary(), "cache_layers": cache_layers, "n_examples": len(chosen)}


# --------------------------------------------------------------------------- what a switch costs


def _flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def _timed(fn, repeats: int) -> dict:
    """After a warm-up, `repeats` timed calls: their median ("seconds") and every one of them."""
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    return {"seconds": statistics.median(times), "seconds_repeats": times}


@torch.no_grad()
def switch_costs(mp: ModelPlan, model, device: str, repeats: int) -> dict:
    """On one long prefix (`bench_tokens` of the default corpus): per k, the FLOPs and median time
    of building the adapter's cache under each policy, and the memory the policy keeps besides the
    cache (the tail patch stores the boundary hidden states: prefix × hidden numbers)."""
    ids = mp.bench_ids.to(device)
    tokens = ids.shape[-1]
    starts = sorted({mp.n_layers - k for k in mp.k_values})
    pre = base_prefill(model, ids, starts)
    hidden = pre.boundary[starts[0]]
    boundary_bytes = hidden.shape[-1] * hidden.element_size() * tokens
    per_k = {}
    for k in tqdm(mp.k_values, desc=f"{mp.name} switch cost", unit="k"):
        adapter, row = f"tail{k}", {}
        for policy in ("recompute", "tail_patch", "stale"):
            def build(policy=policy, adapter=adapter, k=k):
                return switch_cache(model, policy, pre, ids, adapter, k)
            row[policy] = {"flops": _flops(build), **_timed(build, repeats),
                           "extra_bytes": boundary_bytes if policy == "tail_patch" else 0}
        row["tail_time_fraction"] = row["tail_patch"]["seconds"] / row["recompute"]["seconds"]
        row["tail_flops_fraction"] = row["tail_patch"]["flops"] / row["recompute"]["flops"]
        row["k_over_L"] = k / mp.n_layers
        per_k[str(k)] = row

    def reuse():
        return switch_cache(model, "activated", pre, ids, f"activated{mp.k_values[0]}", mp.k_values[0])
    activated = {"flops": _flops(reuse), **_timed(reuse, repeats), "extra_bytes": 0}
    return {"prefix_tokens": tokens, "per_k": per_k, "activated": activated,
            "boundary_bytes_per_token": boundary_bytes // tokens}


# --------------------------------------------------------------------------- where the answer is read


def layer_groups(n_layers: int, groups: int) -> list[tuple[int, ...]]:
    """`groups` contiguous runs of layers, as even as possible."""
    return [tuple(b) for b in runs(range(n_layers), groups)]


def foreign_sources(pairs: list[tuple], prefix_len: int) -> list[tuple | None]:
    """For each pair, the source context of the next pair (cyclically) whose first `prefix_len`
    tokens differ from this pair's target: the failing control's source. None where no pair has
    another prefix."""
    out = []
    for i, (target, _, *_) in enumerate(pairs):
        others = [pairs[(i + j) % len(pairs)][1] for j in range(1, len(pairs))]
        out.append(next((o for o in others if tuple(o[:prefix_len]) != tuple(target[:prefix_len])), None))
    return out


def patch_map(mp: ModelPlan, model, device: str, groups: int, task: str) -> dict:
    """The patching map of the tail of depth `patch_k`: each pair's first context patched from the
    second (see `kvutils.lora.patching.answer_map`). Rows: the shared prefix (the control), what follows
    it in quarters, all of what follows; columns: layer groups, all layers. Beside the shared
    prefix's control (a zero by construction), the same prefix cells patched from another pair's
    context (a control that can fail)."""
    m = len(mp.marker_ids)
    pairs = [(a.ids[:-m], b.ids[:-m], a.target, a.other) for a, b in mp.patch_pairs]
    cols = layer_groups(mp.n_layers, groups) + [tuple(range(mp.n_layers))]
    out = answer_map(model, f"tail{mp.patch_k}", pairs, mp.marker_ids, mp.prefix_len, cols, CONTROL_BINS,
                     CONTINUATION_BINS, device, foreign=foreign_sources(pairs, mp.prefix_len))
    rest = "continuation" if task == "senses" else "passage B"
    out["row_labels"] = mp.prefix_labels + [f"{rest} {i}/{CONTINUATION_BINS}" for i in range(
        1, CONTINUATION_BINS + 1)]
    out["row_labels"].append(f"whole {rest}")
    out["col_labels"] = [f"{g[0] + 1}–{g[-1] + 1}" if len(g) > 1 else str(
        g[0] + 1) for g in cols[:-1]] + ["all"]
    return {"adapter": f"tail{mp.patch_k}", "k": mp.patch_k, **out}
