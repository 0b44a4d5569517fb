"""H2O: keep the recent tokens and the heavy hitters of accumulated attention."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.base import check_fraction
from kvutils.cache.methods.policy import DecodePolicy
from kvutils.cache.methods.press import at_ratios, kept_per_head, top_mask


@dataclass(frozen=True)
class H2O(DecodePolicy):
    """H2O (Zhang et al. 2023, arXiv:2306.14048): each KV head keeps its `recent` share of the
    budget as the most recent tokens and the rest as heavy hitters, the entries with the largest
    attention accumulated over every query so far (the prefill's, then each decoded token's; a KV
    head sums its query group's). After each decoded token the non-recent entry with the smallest
    accumulated attention is evicted."""

    recent: float = 0.5
    name: ClassVar[str] = "h2o"
    examples: ClassVar[tuple[str, ...]] = ("h2o:compression_ratio=0.5",)
    display: ClassVar[str] = "H2O"
    colour: ClassVar[str | None] = "#1f77b4"
    place: ClassVar[int] = 200
    # one forward per token on the frontier (~0.05-0.3 s each on a CPU core): at 0.5 only, to keep `make book`
    # within its budget; left out of the retrieval test: its accumulated attention over every prefill query
    # costs 18 s per prompt and level (SmolLM2, 1,024 tokens), a fifth of a chapter's budget
    frontier: ClassVar[tuple[str, ...]] = at_ratios(0.5)
    retrieval: ClassVar[tuple[str, ...]] = ()

    def always_keeps(self):
        return (f"the most recent {self.recent:.0%} of its budget; the rest by accumulated attention "
                "(no sinks: the first tokens stay only as heavy hitters)")

    def __post_init__(self):
        super().__post_init__()
        check_fraction(self.name, "recent", self.recent)

    def start(self, view):
        import torch

        P = view.keys.shape[-2]
        budget = kept_per_head(P, self.compression_ratio)
        recent = min(int(budget * self.recent), budget)
        # (kv_heads, P)
        acc = view.weights()[0].double().sum(1).view(view.keys.shape[1], view.groups, P).sum(1).cpu()
        protected = torch.arange(P) >= P - recent
        held = top_mask(acc.masked_fill(protected, float("inf")), budget)
        return {"held": held, "acc": acc, "budget": budget, "recent": recent}

    def step_many(self, state, weights):
        import torch

        docs, kv_heads, _ = state["held"].shape
        w = weights[:, :, 0].double().cpu()  # (docs, heads, n + 1)
        w = w.view(docs, kv_heads, -1, w.shape[-1]).sum(2)  # (docs, kv_heads, n + 1)
        held = torch.cat([state["held"], torch.ones(docs, kv_heads, 1, dtype=torch.bool)], -1)
        acc = torch.cat([state["acc"], torch.zeros(docs, kv_heads, 1, dtype=torch.float64)], -1) + w * held
        n = held.shape[-1]
        candidates = held & (torch.arange(n) < n - state["recent"])
        evict = acc.masked_fill(~candidates, float("inf")).argmin(-1)  # (docs, kv_heads)
        doc, head = (held.sum(-1) > state["budget"]).nonzero(as_tuple=True)
        held[doc, head, evict[doc, head]] = False
        state.update(held=held, acc=acc)
        return state
