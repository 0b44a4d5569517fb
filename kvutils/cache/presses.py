"""Data-dependent eviction: prefill-time presses and decode-time policies, per layer and KV head.

A press looks once at the prefill (each layer's keys, values and post-rotary queries, as kvpress's
`score(module, hidden_states, keys, values, attentions, kwargs)` does) and decides which prefill
entries each KV head keeps; every decoded token is then kept. `compression_ratio` has kvpress's
meaning: the fraction of the prefill's entries removed, i.e. each KV head keeps
max(1, int(prefill × (1 − compression_ratio))) of them (PyramidKV and AdaKV move that budget
between layers / heads and keep the layer's or model's total). The kept set is fixed after the
prefill, so the one-forward (fast) path scores it exactly; the step path checks it.

A decode-time policy evicts as it goes: its budget, (1 − compression_ratio) × prefill entries per
KV head, is applied at the end of the prefill and then held constant, one entry evicted after every
decoded token's attention. Which entry depends on the attention the evictions so far allowed, so
only the step path scores it. Attention weights are softmax(q·k × the model's scale) under the
model's own mask (causal, and Gemma 3's sliding window where the layer has one).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from kvutils.cache.ops import CacheOp, _check_int, _fail, register
from kvutils.cache.prefilled import LayerView


def _check_ratio(op: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        _fail(op, "compression_ratio", value, "a number with 0 <= compression_ratio < 1")


def kept_per_head(prefill: int, compression_ratio: float) -> int:
    """kvpress's ScorerPress budget: entries each KV head keeps."""
    return max(1, int(prefill * (1 - compression_ratio)))


def top_mask(scores: torch.Tensor, n: int) -> torch.Tensor:
    """(rows, P) bool: the `n` highest scores of each row (ties: the earlier position)."""
    keep = torch.zeros(scores.shape, dtype=torch.bool)
    keep.scatter_(-1, scores.float().cpu().topk(n, dim=-1, sorted=False).indices, True)
    return keep


@dataclass(frozen=True)
class Press(CacheOp):
    """Base of the prefill-time presses: `score(view)` (kv_heads, P), higher = kept."""

    compression_ratio: float = 0.5
    needs_views: ClassVar[bool] = True
    data_dependent: ClassVar[bool] = True
    family: ClassVar[str] = "press"

    def __post_init__(self):
        _check_ratio(self.name, self.compression_ratio)

    def score(self, view: LayerView) -> torch.Tensor:
        raise NotImplementedError

    def budget(self, view: LayerView) -> int:
        return kept_per_head(view.keys.shape[-2], self.compression_ratio)

    def decide(self, views: list[LayerView]) -> list[torch.Tensor]:
        """Per layer, (kv_heads, P) bool: the prefill entries each KV head keeps."""
        return [top_mask(self.score(v), self.budget(v)) for v in views]


@register
@dataclass(frozen=True)
class RandomPress(Press):
    """The baseline every method must beat: each KV head keeps a uniformly random subset of the
    prefill, of kvpress's size; the draw is seeded by `seed` and the layer (same run, same set)."""

    seed: int = 0
    name: ClassVar[str] = "random"
    examples: ClassVar[tuple[str, ...]] = ("random:compression_ratio=0.5",)

    def __post_init__(self):
        super().__post_init__()
        _check_int(self.name, "seed", self.seed, 0)

    def score(self, view):
        g = torch.Generator().manual_seed(self.seed * 100_003 + view.layer)
        return torch.rand(view.keys.shape[1:3], generator=g)


@register
@dataclass(frozen=True)
class KnormPress(Press):
    """Knorm (Devoto et al. 2024, "A simple and effective L2 norm-based strategy for KV cache
    compression"): each KV head keeps the prefill entries whose keys have the smallest L2 norm."""

    name: ClassVar[str] = "knorm"
    examples: ClassVar[tuple[str, ...]] = ("knorm:compression_ratio=0.5",)

    def score(self, view):
        return -view.keys[0].norm(dim=-1)


@register
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

    def __post_init__(self):
        super().__post_init__()
        _check_int(self.name, "window", self.window, 1)
        _check_int(self.name, "kernel", self.kernel, 1)
        if self.kernel % 2 == 0:
            _fail(self.name, "kernel", self.kernel, "an odd integer (the pool is centred)")

    def check_lengths(self, prefill, decode):
        if self.window >= prefill:
            _fail(self.name, "window", self.window, f"smaller than prefill={prefill}")

    def score(self, view):
        w = self.window
        weights = view.weights()[0, :, -w:, :-w].float()  # (heads, window, P - window)
        scores = F.avg_pool1d(weights.mean(1, keepdim=True).transpose(0, 1), self.kernel,
                              padding=self.kernel // 2, stride=1).transpose(0, 1)[:, 0]  # (heads, P - w)
        scores = view.per_kv_head(scores)
        return F.pad(scores, (0, w), value=scores.max().item())  # the window is never pruned


@register
@dataclass(frozen=True)
class PyramidKVPress(SnapKVPress):
    """PyramidKV (Cai et al. 2024, arXiv:2406.02069): SnapKV's scores with layer-dependent budgets,
    largest in the first layer and falling linearly to the last (shape `beta`), their mean the
    SnapKV budget; where the pyramid does not fit the prefill it falls back to SnapKV's budget
    (kvpress's rule, reproduced)."""

    beta: int = 20
    name: ClassVar[str] = "pyramidkv"
    examples: ClassVar[tuple[str, ...]] = ("pyramidkv:compression_ratio=0.5,window=2,kernel=3,beta=2",)

    def __post_init__(self):
        super().__post_init__()
        _check_int(self.name, "beta", self.beta, 1)

    def budget(self, view):
        q_len, w = view.keys.shape[-2], self.window
        capacity = w + q_len * (1 - self.compression_ratio)
        low = (capacity - w) / self.beta
        high = (capacity - w) * 2 - low
        if high >= q_len - w:
            high = q_len - w
            low = (capacity - w) * 2 - high
        if not q_len >= high >= low >= w:
            return max(1, round(q_len * (1 - self.compression_ratio)))
        return max(1, round(high - view.layer * (high - low) / max(view.n_layers - 1, 1)))


@register
@dataclass(frozen=True)
class ExpectedAttentionPress(Press):
    """Expected Attention (Devoto et al. 2025, kvpress): scores each entry by the attention the
    next `future` queries are expected to pay it, modelling them as Gaussian with the mean and
    covariance of the prefill's pre-rotary queries (first `sinks` tokens left out), rotated by the
    mean rotary rotation of positions P … P + future − 1: softmax(s μ·k + s² kᵀΣk / 2) (s the
    model's scale), mean over the query group, times ‖v‖. The first `sinks` entries are always kept.
    kvpress refuses Gemma 3 and Qwen 3 (their query norm breaks its hidden-state shortcut); we take
    the pre-rotary queries themselves, after the norm, so they are included."""

    future: int = 512
    sinks: int = 4
    name: ClassVar[str] = "expected_attention"
    examples: ClassVar[tuple[str, ...]] = ("expected_attention:compression_ratio=0.5,future=16,sinks=2",)

    def __post_init__(self):
        super().__post_init__()
        _check_int(self.name, "future", self.future, 1)
        _check_int(self.name, "sinks", self.sinks, 0)

    def check_lengths(self, prefill, decode):
        if self.sinks >= prefill - 1:
            _fail(self.name, "sinks", self.sinks, f"smaller than prefill - 1 = {prefill - 1}")

    def score(self, view):
        P, d = view.keys.shape[-2], view.keys.shape[-1]
        positions = torch.arange(P)
        cos, sin = view.rotary(positions)  # un-rotate: the rotation by -t is (cos t, -sin t)
        r = cos.shape[-1]
        q = view.queries[0].double()  # (heads, P, d)
        pre = torch.cat([_rotate(q[..., :r], cos[0].double(), -sin[0].double()), q[..., r:]], -1)[:, self.sinks:]
        mu = pre.mean(1)  # (heads, d)
        centred = pre - mu[:, None]
        cov = centred.transpose(1, 2) @ centred / pre.shape[1]  # (heads, d, d)
        fcos, fsin = view.rotary(torch.arange(P, P + self.future))
        mean_rot = _rotation_matrix(fcos[0].double().mean(0), fsin[0].double().mean(0), d)  # (d, d)
        mu = mu @ mean_rot.T
        cov = mean_rot @ cov @ mean_rot.T
        keys = view.keys[0, :, self.sinks:].double().repeat_interleave(view.groups, 0)  # (heads, n, d)
        s = view.scale
        logits = s * (keys @ mu[..., None])[..., 0] + s * s * torch.einsum("hnd,hde,hne->hn", keys, cov, keys) / 2
        scores = view.per_kv_head(logits.softmax(-1)) * view.values[0, :, self.sinks:].double().norm(dim=-1)
        return F.pad(scores, (self.sinks, 0), value=scores.max().item())


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin, the rotary convention of Llama, Gemma, Qwen and NeoX."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def _rotation_matrix(cos: torch.Tensor, sin: torch.Tensor, d: int) -> torch.Tensor:
    """(d, d) matrix R with R x = the rotary rotation of x by (cos, sin) on the first len(cos)
    channels and the identity on the rest."""
    eye = torch.eye(d, dtype=cos.dtype)
    r = cos.shape[-1]
    rotated = torch.cat([_rotate(eye[:, :r], cos, sin), eye[:, r:]], -1)  # row j: R applied to e_j
    return rotated.T


@register
@dataclass(frozen=True)
class AdaKVPress(Press):
    """AdaKV (Feng et al. 2024, arXiv:2407.11550) over SnapKV's scores: the layer's budget (kv_heads
    × kvpress's per-head budget) goes to the top scores across all its KV heads together, so heads
    with concentrated attention give entries to heads with spread-out attention; each head keeps
    at least `safeguard` × the per-head budget (kvpress's alpha_safeguard)."""

    window: int = 64
    kernel: int = 5
    safeguard: float = 0.2
    name: ClassVar[str] = "adakv"
    examples: ClassVar[tuple[str, ...]] = ("adakv:compression_ratio=0.5,window=4,kernel=3",)

    def __post_init__(self):
        super().__post_init__()
        SnapKVPress(self.compression_ratio, self.window, self.kernel)  # same checks
        f = self.safeguard
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0:
            _fail(self.name, "safeguard", f, "a number between 0 and 1")

    def check_lengths(self, prefill, decode):
        SnapKVPress(self.compression_ratio, self.window, self.kernel).check_lengths(prefill, decode)

    def decide(self, views):
        out = []
        for view in views:
            scores = SnapKVPress(self.compression_ratio, self.window, self.kernel).score(view).float().cpu()
            heads, P = scores.shape
            n_kept = kept_per_head(P, self.compression_ratio)
            safe = top_mask(scores, int(n_kept * self.safeguard)) if int(n_kept * self.safeguard) else None
            if safe is not None:
                scores = scores.masked_fill(safe, torch.finfo(scores.dtype).max)
            out.append(top_mask(scores.reshape(1, -1), heads * n_kept).view(heads, P))
        return out


# --------------------------------------------------------------------------- decode-time policies


@dataclass(frozen=True)
class DecodePolicy(CacheOp):
    """Base of the decode-time policies. `start(view)` -> state with `held` (kv_heads, P) bool, cut to
    the budget; `step(state, weights)` takes the attention weights (1, heads, 1, n + 1) of the query
    at n over every slot so far and leaves `held` (kv_heads, n + 1) at the budget again.
    `stack(states)` joins several documents' states of one layer (tensors gain a leading document
    axis) and `step_many(state, weights)` steps them together, weights (docs, heads, 1, n + 1);
    `step` is `step_many` on a stack of one."""

    compression_ratio: float = 0.5
    needs_views: ClassVar[bool] = True
    data_dependent: ClassVar[bool] = True
    has_fast_path: ClassVar[bool] = False
    family: ClassVar[str] = "decode-time eviction"

    def __post_init__(self):
        _check_ratio(self.name, self.compression_ratio)

    def stack(self, states: list[dict]) -> dict:
        return {k: torch.stack([s[k] for s in states]) if torch.is_tensor(v) else v for k, v in states[0].items()}

    def step(self, state, weights):
        stepped = self.step_many(self.stack([state]), weights)
        state.update({k: v[0] if torch.is_tensor(v) else v for k, v in stepped.items()})
        return state

    def step_many(self, state: dict, weights: torch.Tensor) -> dict:
        raise NotImplementedError


@register
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

    def __post_init__(self):
        super().__post_init__()
        f = self.recent
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0.0 <= f <= 1.0:
            _fail(self.name, "recent", f, "a number between 0 and 1")

    def start(self, view):
        P = view.keys.shape[-2]
        budget = kept_per_head(P, self.compression_ratio)
        recent = min(int(budget * self.recent), budget)
        acc = view.weights()[0].double().sum(1).view(view.keys.shape[1], view.groups, P).sum(1).cpu()  # (kv_heads, P)
        protected = torch.arange(P) >= P - recent
        held = top_mask(acc.masked_fill(protected, float("inf")), budget)
        return {"held": held, "acc": acc, "budget": budget, "recent": recent}

    def step_many(self, state, weights):
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


@register
@dataclass(frozen=True)
class TOVA(DecodePolicy):
    """TOVA (Oren et al. 2024, arXiv:2401.06104): after each decoded token, evict the entry with the
    lowest attention from that token's query, averaged over all heads of the layer (one kept set per
    layer, as the paper and kvpress; the new token itself may go). The prefill is cut to the budget
    by the last prefill query's attention, as kvpress's TOVAPress does."""

    name: ClassVar[str] = "tova"
    examples: ClassVar[tuple[str, ...]] = ("tova:compression_ratio=0.5",)

    def start(self, view):
        P = view.keys.shape[-2]
        budget = kept_per_head(P, self.compression_ratio)
        scores = view.weights()[0, :, -1].double().mean(0).cpu()  # (P,)
        scores[-1] = float("inf")  # the last token: kept (kvpress pads it with the max)
        held = top_mask(scores[None], budget).expand(view.keys.shape[1], -1).clone()
        return {"held": held, "budget": budget}

    def step_many(self, state, weights):
        docs, kv_heads, _ = state["held"].shape
        w = weights[:, :, 0].double().mean(1).cpu()  # (docs, n + 1)
        held = torch.cat([state["held"], torch.ones(docs, kv_heads, 1, dtype=torch.bool)], -1)
        victim = w.masked_fill(~held[:, 0], float("inf")).argmin(-1)  # (docs,)
        doc = (held[:, 0].sum(-1) > state["budget"]).nonzero().squeeze(1)
        held[doc, :, victim[doc]] = False
        state["held"] = held
        return state
