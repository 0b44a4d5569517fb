"""Expected Attention: score each entry by the attention the coming queries are expected to pay it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvutils.cache.base import reject
from kvutils.cache.methods.press import AT_LEVELS, FRONTIER_RATIOS, Press, at_ratios
from kvutils.core import checks

if TYPE_CHECKING:
    import torch


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
    display: ClassVar[str] = "Expected Attention"
    colour: ClassVar[str | None] = "#d62728"
    place: ClassVar[int] = 130  # before PyramidKV on the frontier and in the retrieval test
    frontier: ClassVar[tuple[str, ...]] = at_ratios(*FRONTIER_RATIOS)
    retrieval: ClassVar[tuple[str, ...]] = AT_LEVELS

    def always_keeps(self):
        return f"the first {self.sinks} tokens (sinks; kvpress's n_sink = 4)"

    def __post_init__(self):
        super().__post_init__()
        checks.check_count(f"{self.name}: future", self.future)
        checks.check_count(f"{self.name}: sinks", self.sinks, 0)

    def check_lengths(self, prefill, decode):
        if self.sinks >= prefill - 1:
            reject(self.name, "sinks", self.sinks, f"smaller than prefill - 1 = {prefill - 1}")

    def score(self, view):
        import torch
        import torch.nn.functional as F

        P, d = view.keys.shape[-2], view.keys.shape[-1]
        # float32, the precision of the models' caches here (kvpress scores in the model's dtype): the
        # statistics and the quadratic term are (heads, d, d) products over every entry, 3x slower in
        # float64; the scores agree with float64's to ~1e-6 of their scale (a test holds them to it)
        f32 = torch.float32
        positions = torch.arange(P)
        cos, sin = view.rotary(positions)  # un-rotate: the rotation by -t is (cos t, -sin t)
        r = cos.shape[-1]
        q = view.queries[0].to(f32)  # (heads, P, d)
        pre = torch.cat([rotate(q[..., :r], cos[0].to(f32), -sin[0].to(f32)), q[..., r:]], -1)[:, self.sinks:]
        mu = pre.mean(1)  # (heads, d)
        centred = pre - mu[:, None]
        cov = centred.transpose(1, 2) @ centred / pre.shape[1]  # (heads, d, d)
        fcos, fsin = view.rotary(torch.arange(P, P + self.future))
        mean_rot = rotation_matrix(fcos[0].double().mean(0), fsin[0].double().mean(0), d).to(f32)  # (d, d)
        mu = mu @ mean_rot.T
        cov = mean_rot @ cov @ mean_rot.T
        keys = view.keys[0, :, self.sinks:].to(f32).repeat_interleave(view.groups, 0)  # (heads, n, d)
        s = view.scale
        logits = s * (keys @ mu[..., None])[..., 0] + s * s * ((keys @ cov) * keys).sum(-1) / 2  # (heads, n)
        values = view.values[0, :, self.sinks:].double().norm(dim=-1)  # (kv_heads, n)
        scores = view.per_kv_head(logits.double().softmax(-1)) * values
        return F.pad(scores, (self.sinks, 0), value=scores.max().item())


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x·cos + rotate_half(x)·sin, the rotary convention of Llama, Gemma, Qwen and NeoX."""
    import torch

    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def rotation_matrix(cos: torch.Tensor, sin: torch.Tensor, d: int) -> torch.Tensor:
    """(d, d) matrix R with R x = the rotary rotation of x by (cos, sin) on the first len(cos)
    channels and the identity on the rest."""
    import torch

    eye = torch.eye(d, dtype=cos.dtype)
    r = cos.shape[-1]
    rotated = torch.cat([rotate(eye[:, :r], cos, sin), eye[:, r:]], -1)  # row j: R applied to e_j
    return rotated.T
