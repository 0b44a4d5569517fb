"""The training options a parameter check names before torch loads: the learning-rate schedules and
the losses (kvutils.lora.training uses them), in plain Python."""
from __future__ import annotations

import math

SCHEDULES = ("constant", "cosine")  # cosine: linear warm-up, then cosine decay to 0 at the last step
# cross-entropy over the whole vocabulary, or over the right and the wrong answer
LOSSES = ("vocab", "answers")


def lr_factor(step: int, steps: int, schedule: str, warmup: int) -> float:
    """The learning rate at `step` (0-based) as a share of the peak: 1 throughout for "constant";
    for "cosine", a linear rise over the first `warmup` steps (step 0 at 1 / (warmup + 1)), then
    half a cosine from 1 down to 0 after the last step."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule: {schedule!r} is not allowed; choose one of {', '.join(SCHEDULES)}")
    if schedule == "constant":
        return 1.0
    if step < warmup:
        return (step + 1) / (warmup + 1)
    done = (step - warmup + 1) / max(1, steps - warmup)  # 1 after the last step
    return 0.5 * (1 + math.cos(math.pi * done)) if done < 1 else 0.0
