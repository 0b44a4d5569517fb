"""Training one adapter from the boundary states: AdamW on cross-entropy at the last position
(over the whole vocabulary, or over the two answers), through the tail's layers only, in float32
or under bfloat16 autocast, at a constant learning rate or a linear warm-up then cosine decay,
the gradient clipped to a norm."""
from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from tqdm import tqdm

from kvutils.core import checkpoints, cores
from kvutils.lora.boundary import marker_logits, select_rows, tail_logits
from kvutils.lora.schedule import LOSSES, lr_factor
from kvutils.lora.tails import adapter_parameters

TRAIN_DTYPES = ("auto", "float32", "bfloat16")
# in make book, an adapter's training is stored every this many steps (resumed from there)
CHECKPOINT_STEPS = 16


def resolve_train_dtype(train_dtype: str, device: str) -> str:
    """"auto": bfloat16 where the device multiplies bfloat16 natively (a CPU with AVX512-BF16 or AMX
    — there bfloat16 autocast trains a tail about twice as fast — or a CUDA GPU that supports it),
    float32 elsewhere (emulated bfloat16 would be slower than float32)."""
    if train_dtype not in TRAIN_DTYPES:
        raise ValueError(f"train_dtype: {train_dtype!r} is not allowed; choose one of "
                         f"{', '.join(TRAIN_DTYPES)}")
    if train_dtype != "auto":
        return train_dtype
    kind = torch.device(device).type
    if kind == "cpu":
        native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    else:
        native = kind == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return "bfloat16" if native else "float32"


def training_precision(train_dtype: str, device: str | torch.device):
    """The context a training forward runs in: autocast to bfloat16 (the matrix products in
    bfloat16; the LoRA weights, their gradients and AdamW stay float32), or nothing for float32.
    Open it around a forward, never around optimizer steps (autocast keeps its casts of trainable
    weights until it closes). Evaluation runs outside it, in the model's own dtype."""
    if train_dtype == "float32":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=getattr(torch, train_dtype))


@dataclass
class Batch:
    """A left-padded batch: every row ends with the marker, the answer is read at the last position."""

    ids: torch.Tensor  # (batch, seq)
    mask: torch.Tensor  # (batch, seq) 1 on real tokens
    targets: torch.Tensor  # (batch,) the answer token
    marker_len: int  # tokens of the marker (the activated adapter's offset from the end)
    others: torch.Tensor | None = None  # (batch,) the wrong answer's token: needed by the "answers" loss


def step_loss(logits: torch.Tensor, batch: Batch, rows, loss: str) -> torch.Tensor:
    """Mean cross-entropy of a step: over the vocabulary (the answer token), or over the two
    answers alone (ln 2 for a coin), which is what accuracy reads (right logit above wrong)."""
    logits = logits.float()  # (rows, vocab)
    if loss == "vocab":
        return torch.nn.functional.cross_entropy(logits, batch.targets[rows])
    if loss != "answers":
        raise ValueError(f"loss: {loss!r} is not allowed; choose one of {', '.join(LOSSES)}")
    if batch.others is None:
        raise ValueError('the "answers" loss needs the batch\'s wrong answers (Batch.others)')
    pair = torch.stack([logits.gather(1, batch.targets[rows, None])[:, 0],
                        logits.gather(1, batch.others[rows, None])[:, 0]], dim=1)  # (rows, 2)
    return torch.nn.functional.cross_entropy(pair, torch.zeros(len(pair), dtype=torch.long,
                                                               device=pair.device))


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def train_adapter(model, adapter_name: str, boundary: torch.Tensor, batch: Batch, start: int, steps: int,
                  lr: float, batch_size: int, seed: int, activated: bool = False,
                  on_step: Callable[[int, float], None] | None = None, prefix_cache=None,
                  train_dtype: str = "float32", schedule: str = "constant", warmup: int = 0,
                  loss: str = "vocab", checkpoint: str | None = None,
                  max_grad_norm: float = 0.0) -> list[float]:
    """Train one adapter with AdamW on next-token cross-entropy at the last position; return the
    loss of every step.

    `boundary` (examples, seq, hidden) holds the frozen base layers' output at layer `start` for the
    whole training set, computed once: each step runs forward and backward through layers
    start … L−1 only. Only the adapter's LoRA weights have gradients. Seeded: the same arguments
    give the same losses. An activated adapter given `prefix_cache` (the base model's K/V of every
    example before its marker, see `marker_logits`) runs only the marker's tokens. `train_dtype`
    "bfloat16" runs each step's forward under autocast (see `training_precision`). `schedule` and
    `warmup` shape the learning rate over the steps (`lr_factor`); `loss` is "vocab" (the answer
    token against the whole vocabulary) or "answers" (against the wrong answer alone).
    `max_grad_norm` > 0 scales the adapter's gradient down to that norm (all its weights together)
    before each step where it is larger, so one outlying batch enters AdamW's moments at no more
    than that norm (0: no clipping). It bounds an outlier, not the step size: at too high a learning
    rate the loss still spikes (chapter 5's Qwen in float32 at 0.002).
    `checkpoint`: a key naming this training within its job; in `make book` its progress is then
    stored every CHECKPOINT_STEPS steps (`kvutils.core.checkpoints`) and an interrupted build resumes
    it from the last one, with the same losses as an uninterrupted run.
    """
    lr_factor(0, steps, schedule, warmup)  # an unknown schedule fails before any work
    if not max_grad_norm >= 0:
        raise ValueError(f"max_grad_norm: {max_grad_norm!r} is not allowed; give a norm > 0, or 0 for no "
                         "clipping")
    if loss not in LOSSES:
        raise ValueError(f"loss: {loss!r} is not allowed; choose one of {', '.join(LOSSES)}")
    if prefix_cache is not None and not activated:
        raise ValueError(
            "prefix_cache is for an activated adapter only: a LoRA tail changes the prefix's K/V")
    model.set_adapter(adapter_name)
    params = adapter_parameters(model, adapter_name)
    if not params:
        raise ValueError(f"adapter {adapter_name!r} has no LoRA weights")
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(step, steps, schedule,
                                                                                    warmup))
    try:
        progress = _Progress(checkpoint, params, optimizer, scheduler, steps)
        return _train_steps(model, adapter_name, boundary, batch, start, steps, progress, batch_size,
                            seed, activated, on_step, prefix_cache, train_dtype, loss, max_grad_norm)
    finally:
        for p in params:
            p.requires_grad_(False)


class _Progress:
    """An adapter's training state (its LoRA weights, AdamW's moments, the schedule's step, the batch
    order's generator and queue, the losses so far), stored every CHECKPOINT_STEPS steps where the
    build keeps checkpoints, and read back by `resume`."""

    def __init__(self, key: str | None, params: list, optimizer, scheduler, steps: int):
        self.root = checkpoints.folder() if key else None
        self.key, self.params, self.optimizer, self.scheduler, self.steps = (key, params, optimizer,
                                                                             scheduler, steps)

    def _key(self, step: int) -> str:
        return f"{self.key}-{self.steps}steps-at{step}"

    def save(self, step: int, order: random.Random, queue: list[int], losses: list[float]) -> None:
        if self.root is None or not step or step % CHECKPOINT_STEPS:
            return
        version, state, gauss = order.getstate()
        checkpoints.save(self.root, self._key(step), {
            "params": list(self.params), "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(), "order": [version, list(state), gauss],
            "queue": queue, "losses": losses})
        if step > CHECKPOINT_STEPS:
            checkpoints.remove(self.root, self._key(step - CHECKPOINT_STEPS))

    def finished(self) -> None:
        """The training ran to its end: its last stored progress is of no further use."""
        if self.root is not None and self.steps > CHECKPOINT_STEPS:
            checkpoints.remove(self.root, self._key((self.steps - 1) // CHECKPOINT_STEPS * CHECKPOINT_STEPS))

    @torch.no_grad()
    def resume(self, order: random.Random) -> tuple[int, list[int], list[float]]:
        """(the step to start at, the queue, the losses so far), the state put back where one was stored."""
        if self.root is None:
            return 0, [], []
        for step in range(self.steps - 1 - (self.steps - 1) % CHECKPOINT_STEPS, 0, -CHECKPOINT_STEPS):
            state = checkpoints.load(self.root, self._key(step))
            if state is None:
                continue
            for param, value in zip(self.params, state["params"]):
                param.copy_(value)
            optimizer = state["optimizer"]  # JSON made its parameters' indices text
            optimizer["state"] = {int(i): moments for i, moments in optimizer["state"].items()}
            self.optimizer.load_state_dict(optimizer)
            self.scheduler.load_state_dict(state["scheduler"])
            version, internal, gauss = state["order"]
            order.setstate((version, tuple(internal), gauss))
            print(f"checkpoint: {self.key} resumed at step {step} of {self.steps}", flush=True)
            return step, list(state["queue"]), list(state["losses"])
        return 0, [], []


def _train_steps(model, adapter_name: str, boundary: torch.Tensor, batch: Batch, start: int, steps: int,
                 progress: _Progress, batch_size: int, seed: int, activated: bool, on_step, prefix_cache,
                 train_dtype: str, loss_kind: str, max_grad_norm: float) -> list[float]:
    optimizer, scheduler = progress.optimizer, progress.scheduler
    order = random.Random(seed)
    n = boundary.shape[0]
    first, queue, losses = progress.resume(order)
    for step in tqdm(range(first, steps), desc=f"train {adapter_name}", unit="step", initial=first,
                     total=steps):
        progress.save(step, order, queue, losses)
        cores.share()  # in make book, the cores other jobs have freed
        if len(queue) < batch_size:  # epochs of a seeded permutation
            perm = list(range(n))
            order.shuffle(perm)
            queue += perm
        rows, queue = queue[:batch_size], queue[batch_size:]
        mask = batch.mask[rows]
        # autocast around the forward only: it caches the low-precision copy of each trainable
        # weight for as long as it is open, so around the loop the optimizer's steps would go unseen
        with training_precision(train_dtype, boundary.device):
            if prefix_cache is not None:
                logits = marker_logits(model, boundary[rows], mask, start, batch.marker_len,
                                       select_rows(prefix_cache, rows))
            else:
                offsets = [batch.marker_len] * len(rows) if activated else None
                logits = tail_logits(model, boundary[rows], mask, start, offsets)
        loss = step_loss(logits, batch, rows, loss_kind)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm:
            torch.nn.utils.clip_grad_norm_(progress.params, max_grad_norm)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"training {adapter_name}: loss became {losses[-1]} at step {step}")
    progress.finished()
    return losses
