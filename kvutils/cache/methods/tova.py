"""TOVA: after each decoded token, evict the entry its query attends to least."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kvutils.cache.methods.policy import DecodePolicy
from kvutils.cache.methods.press import AT_LEVELS, at_ratios, kept_per_head, top_mask


@dataclass(frozen=True)
class TOVA(DecodePolicy):
    """TOVA (Oren et al. 2024, arXiv:2401.06104): after each decoded token, evict the entry with the
    lowest attention from that token's query, averaged over all heads of the layer (one kept set per
    layer, as the paper and kvpress; the new token itself may go). The prefill is cut to the budget
    by the last prefill query's attention, as kvpress's TOVAPress does."""

    name: ClassVar[str] = "tova"
    examples: ClassVar[tuple[str, ...]] = ("tova:compression_ratio=0.5",)
    display: ClassVar[str] = "TOVA"
    colour: ClassVar[str | None] = "gold"
    place: ClassVar[int] = 210
    # also at 0.25, where the retrieval test scores it (its KL beside its retrieval at both levels)
    frontier: ClassVar[tuple[str, ...]] = at_ratios(0.25, 0.5)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS

    def always_keeps(self):
        return "the last prefill token at the cut; then nothing (the entry with the least attention goes)"

    def start(self, view):
        P = view.keys.shape[-2]
        budget = kept_per_head(P, self.compression_ratio)
        scores = view.weights(last=1)[0, :, -1].double().mean(0).cpu()  # (P,)
        scores[-1] = float("inf")  # the last token: kept (kvpress pads it with the max)
        held = top_mask(scores[None], budget).expand(view.keys.shape[1], -1).clone()
        return {"held": held, "budget": budget}

    def step_many(self, state, weights):
        import torch

        docs, kv_heads, _ = state["held"].shape
        w = weights[:, :, 0].double().mean(1).cpu()  # (docs, n + 1)
        held = torch.cat([state["held"], torch.ones(docs, kv_heads, 1, dtype=torch.bool)], -1)
        victim = w.masked_fill(~held[:, 0], float("inf")).argmin(-1)  # (docs,)
        doc = (held[:, 0].sum(-1) > state["budget"]).nonzero().squeeze(1)
        held[doc, :, victim[doc]] = False
        state["held"] = held
        return state
