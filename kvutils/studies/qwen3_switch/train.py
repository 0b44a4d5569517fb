"""Chapter 5's adapters: a LoRA tail and an activated LoRA per k, each trained from the boundary
states of the training set (one base pass for all of them), and their accuracy read from those
states."""
from __future__ import annotations

import functools
import statistics
import time

import torch

from kvutils.core import checkpoints
from kvutils.lora.boundary import cache_from_layers, cache_layers, states_and_prefix_cache, tail_logits
from kvutils.lora.tails import active_adapter, adapter_parameters, lora_tail
from kvutils.lora.training import Batch, left_pad, train_adapter, training_precision
from kvutils.studies.qwen3_switch.policies import EVAL_BATCH, scored
from kvutils.studies.qwen3_switch.study import ModelPlan, Plan
from kvutils.studies.qwen3_switch.tasks import Example

TRAIN_ACCURACY_MAX = 64  # training examples scored per adapter (the fit, not the skill)


def _batch(examples: list[Example], pad_id: int, marker_len: int, device: str) -> tuple[Batch, torch.Tensor]:
    ids, mask = left_pad([e.ids for e in examples], pad_id)
    others = torch.tensor([e.other for e in examples], device=device)
    batch = Batch(ids.to(device), mask.to(device), torch.tensor([e.target for e in examples], device=device),
                  marker_len, others)
    return batch, others


@torch.no_grad()
def accuracy(model, adapter: str | None, boundary: torch.Tensor, batch: Batch, others: torch.Tensor,
             start: int, activated: bool = False) -> dict:
    """Accuracy (the right answer's logit above the wrong one's: chance 50 %) and label top-1 (the
    right answer is the most likely token of the whole vocabulary), in %, from the hidden states at
    layer `start`. `adapter` None: the base model."""
    right, top1 = [], []
    with active_adapter(model, adapter):
        for a in range(0, len(others), EVAL_BATCH):
            rows = slice(a, a + EVAL_BATCH)
            offsets = [batch.marker_len] * len(others[rows]) if activated else None
            logits = tail_logits(model, boundary[rows], batch.mask[rows], start, offsets)
            target, other = batch.targets[rows], others[rows]
            right += (logits.gather(1, target[:, None]) > logits.gather(1, other[:, None]))[:, 0].tolist()
            top1 += (logits.argmax(-1) == target).tolist()
    return {**scored(right), "label_top1_pct": 100 * statistics.fmean(top1), "right_per_example": right}


def adapter_names(mp: ModelPlan) -> list[tuple[str, int, bool]]:
    """(name, k, activated) of every adapter: a LoRA tail and an activated LoRA per k."""
    return [(f"tail{k}", k, False) for k in mp.k_values] + [(f"activated{k}", k, True) for k in mp.k_values]


def base_pass(p: Plan, mp: ModelPlan, model, train: Batch) -> tuple[dict[int, torch.Tensor], object]:
    """One base pass over the training set: the boundaries every tail trains from, and the prefix's
    K/V the activated adapters read. In `make book` it is a checkpoint's unit (`kvutils.core.checkpoints`),
    read back when an interrupted build resumes before every adapter is trained."""
    starts = sorted({mp.n_layers - k for k in mp.k_values})

    def compute() -> dict:
        with training_precision(p.train_dtype, p.device):
            boundary, cache = states_and_prefix_cache(model, train.ids, train.mask, starts,
                                                      len(mp.marker_ids))
        dtype = getattr(torch, p.dtype)
        # autocast may leave bf16
        return {"boundary": {str(layer): states.to(dtype) for layer, states in boundary.items()},
                "prefix": cache_layers(cache)}

    stored = checkpoints.stored(f"{mp.name}-base-pass", compute)
    return ({int(layer): states for layer, states in stored["boundary"].items()},
            cache_from_layers(model, stored["prefix"]))


def _train_one(p: Plan, mp: ModelPlan, model, name: str, k: int, activated: bool, boundary, prefix_cache,
               train: Batch,
               fit: tuple[Batch, torch.Tensor]) -> dict:
    """One adapter trained (its weights and its numbers): `boundary(start)` and `prefix_cache()` give
    the base pass's states, made when first asked for."""
    start = mp.n_layers - k
    began = time.perf_counter()
    losses = train_adapter(model, name, boundary(start), train, start, mp.steps, mp.lr, p.batch_size, p.seed,
                           activated=activated, prefix_cache=prefix_cache() if activated else None,
                           train_dtype=p.train_dtype, schedule=p.schedule, warmup=p.warmup, loss=p.loss,
                           checkpoint=f"{mp.name}-{name}", max_grad_norm=p.max_grad_norm)
    fit_batch, fit_other = fit
    entry = {"k": k, "activated": activated, "losses": losses, "train_seconds": time.perf_counter() - began,
             "trainable_parameters": sum(t.numel() for t in adapter_parameters(model, name)),
             "train": accuracy(model, name, boundary(start)[:len(fit_other)], fit_batch, fit_other, start,
                               activated)}
    return {"weights": adapter_parameters(model, name), "entry": entry}


def train_all(p: Plan, mp: ModelPlan, model, pad_id: int) -> tuple[object, dict]:
    """Every adapter, trained from the boundary states of the training set (computed once); their
    fit on (at most TRAIN_ACCURACY_MAX) training examples. Held-out accuracy comes from the switch.
    In `make book` each trained adapter is a checkpoint's unit, and so is its training every few steps."""
    marker_len = len(mp.marker_ids)
    train, train_other = _batch(mp.train, pad_id, marker_len, p.device)
    starts = sorted({mp.n_layers - k for k in mp.k_values})
    base: list = []  # the base pass, made (or read back) when something first needs it

    def boundary(start: int) -> torch.Tensor:
        if not base:
            base.extend(base_pass(p, mp, model, train))
        return base[0][start]

    fit = slice(0, TRAIN_ACCURACY_MAX)
    fit_batch = Batch(train.ids[fit], train.mask[fit], train.targets[fit], marker_len)
    zero_shot = checkpoints.stored(f"{mp.name}-zero-shot", lambda: accuracy(
        model, None, boundary(starts[0])[fit], fit_batch, train_other[fit], starts[0]))
    out = {"zero_shot": {"train": zero_shot}, "adapters": {}}
    for name, k, activated in adapter_names(mp):  # each training has its own progress bar
        model = lora_tail(model, k, p.rank, p.alpha, p.targets, adapter_name=name, seed=p.seed,
                          invocation_tokens=mp.marker_ids if activated else None)
        done = checkpoints.stored(f"{mp.name}-{name}-trained", functools.partial(
            _train_one, p, mp, model, name, k, activated, boundary, lambda: base[1], train,
            (fit_batch, train_other[fit])))
        # the same weights where it was just trained; the stored ones where it was read back
        with torch.no_grad():
            for param, value in zip(adapter_parameters(model, name), done["weights"]):
                param.copy_(value)
        out["adapters"][name] = done["entry"]
    return model, out
