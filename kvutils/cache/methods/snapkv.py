"""SnapKV: score each entry by the attention the prefill's last queries pay it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import reject
from kvutils.cache.methods.press import AT_LEVELS, FRONTIER_RATIOS, Press, at_ratios
from kvutils.core import checks


@dataclass(frozen=True)
class SnapKVPress(Press):
    """SnapKV (Li et al. 2024, arXiv:2404.14469): the observation window is the last `window`
    prefill tokens. Each earlier entry is scored by the attention those queries pay it (mean over
    the window's queries, smoothed by an average pool of `kernel` positions, mean over the KV head's
    query group); the window itself is always kept; the rest of the budget goes to the top scores."""

    window: int = 64
    kernel: int = 5
    name: ClassVar[str] = "snapkv"
    examples: ClassVar[tuple[str, ...]] = ("snapkv:compression_ratio=0.5,window=4,kernel=3",)
    display: ClassVar[str] = "SnapKV"
    colour: ClassVar[str | None] = "#2ca02c"
    place: ClassVar[int] = 120
    frontier: ClassVar[tuple[str, ...]] = at_ratios(*FRONTIER_RATIOS)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS

    def always_keeps(self):
        return (f"its observation window, the last {self.window} prefill tokens; no sinks "
                "(kvpress's SnapKV protects none)")

    def __post_init__(self):
        super().__post_init__()
        checks.check_count(f"{self.name}: window", self.window)
        checks.check_count(f"{self.name}: kernel", self.kernel)
        if self.kernel % 2 == 0:
            reject(self.name, "kernel", self.kernel, "an odd integer (the pool is centred)")

    def check_lengths(self, prefill, decode):
        if self.window >= prefill:
            reject(self.name, "window", self.window, f"smaller than prefill={prefill}")

    def score(self, view):
        import torch.nn.functional as F

        w = self.window
        weights = view.weights(last=w)[0, :, :, :-w].float()  # (heads, window, P - window)
        scores = F.avg_pool1d(weights.mean(1, keepdim=True).transpose(0, 1), self.kernel,
                              padding=self.kernel // 2, stride=1).transpose(0, 1)[:, 0]  # (heads, P - w)
        scores = view.per_kv_head(scores)
        return F.pad(scores, (0, w), value=scores.max().item())  # the window is never pruned
