"""What the cache buys and what reading it costs (chapter 4, E4): the analytical compute of a decode
step with and without the cache, a measured decode step, and the memory-bandwidth bound of that
step. Its bytes are counted in `kvutils.cache.sizes`.
"""
from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from kvutils.cache.sizes import cache_object_bytes, model_cache_bytes
from kvutils.models.layers import kv_shape, layer_windows
from kvutils.models.loading import Loaded

# --------------------------------------------------------------------------- compute


def matmul_weights(loaded: Loaded) -> tuple[int, int]:
    """(weights of the decoder layers' linear maps, weights of the output head)."""
    layers = sum(m.weight.numel() for name, m in loaded.model.named_modules()
                 if isinstance(m, torch.nn.Linear) and ".layers." in f".{name}.")
    head = loaded.model.get_output_embeddings().weight.numel()
    return layers, head


def step_flops(loaded: Loaded, context: int, cached: bool) -> float:
    """Multiply-adds × 2 of one decode step that predicts token `context + 1`.

    Cached: one new token through every layer, attending to `context + 1` keys. Uncached: all
    `context + 1` tokens through every layer (causal attention: token i sees i keys), logits for
    the last one only. Each attended key costs 2 × head_dim multiply-adds per query head (scores
    and the weighted sum of values); a sliding-window layer attends to at most its window.
    """
    config = loaded.config
    layer_weights, head_weights = matmul_weights(loaded)
    attn_width = config.num_attention_heads * kv_shape(config)[1]
    windows = layer_windows(config)
    n = context + 1
    positions = [n] if cached else range(1, n + 1)
    attended = sum(min(p, w) if w else p for p in positions for w in windows)
    tokens = 1 if cached else n
    return 2.0 * (layer_weights * tokens + 2 * attn_width * attended + head_weights)


# --------------------------------------------------------------------------- time


def repeat_seconds(fn, repeats: int) -> list[float]:
    """Seconds of each of `repeats` calls of `fn`, in the order they ran."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(fn, repeats: int) -> float:
    return statistics.median(repeat_seconds(fn, repeats))


@dataclass
class StepTimes:
    context: int
    cached_ms: float  # median of the repeats
    uncached_ms: float  # median of the repeats
    cache_bytes: int  # what the prefilled cache of the context really held
    cached_repeats_ms: list[float] = field(default_factory=list)  # every repeat, in the order timed
    uncached_repeats_ms: list[float] = field(default_factory=list)

    @property
    def speedup(self) -> float:
        """Ratio of the medians."""
        return self.uncached_ms / self.cached_ms

    @property
    def speedups(self) -> list[float]:
        """Speed-up of each repeat pair (the i-th uncached step over the i-th cached step)."""
        return [u / c for u, c in zip(self.uncached_repeats_ms, self.cached_repeats_ms)]


WARMUPS = 3  # untimed rounds of each step before the timed repeats
SPREAD = 0.10  # timing goes on while either side's interquartile range exceeds this share of its median
MORE_REPEATS = 3  # ... up to this many times the repeats asked for


def settled(values: list[float], spread: float = SPREAD) -> bool:
    """The repeats' interquartile range within `spread` of their median (a noisy run times more)."""
    q1, median, q3 = statistics.quantiles(values, n=4,
                                          method="inclusive") if len(values) > 1 else [values[0]] * 3
    return q3 - q1 <= spread * median


@torch.inference_mode()
def decode_step_times(loaded: Loaded, ids: torch.Tensor, repeats: int = 5) -> StepTimes:
    """Time of one decode step after the context `ids` (1, context), every repeat kept and the
    median of each side: with the cache (one token against a prefilled cache, fresh copy each
    repeat so the context stays fixed) and without it (the whole context plus the new token, from
    scratch). After WARMUPS untimed rounds of each (a first round alone still ran 2-3× slower than
    the later ones: allocator and kernel caches), the two are timed alternately (cached, uncached,
    cached, …), so a repeat pair shares the machine's state of the moment. Past `repeats` pairs, timing
    goes on while either side's spread is not `settled`, up to MORE_REPEATS × `repeats` pairs: the
    page gives every repeat's spread, and a busy moment buys more repeats, not a wider median."""
    model, ids = loaded.model, ids.to(loaded.device)
    context = ids.shape[-1]
    prefilled = DynamicCache(config=model.config)
    out = model(input_ids=ids, cache=prefilled, use_cache=True, logits_to_keep=1)
    new = out.logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    full = torch.cat([ids, new], dim=-1)  # (1, context + 1)

    def cached_step(cache):
        model(input_ids=new, cache=cache, use_cache=True, logits_to_keep=1)

    def uncached_step():
        model(input_ids=full, use_cache=False, logits_to_keep=1)

    # more are copied where timing goes on
    caches = [copy.deepcopy(prefilled) for _ in range(repeats + WARMUPS)]
    for _ in range(WARMUPS):  # untimed
        cached_step(caches.pop())
        uncached_step()
    cached, uncached = [], []
    while len(cached) < repeats or (len(cached) < MORE_REPEATS * repeats
                                    and not (settled(cached) and settled(uncached))):
        cache = caches.pop() if caches else copy.deepcopy(prefilled)
        cached.append(1e3 * _time_once(lambda cache=cache: cached_step(cache)))
        uncached.append(1e3 * _time_once(uncached_step))
    return StepTimes(context, statistics.median(cached), statistics.median(uncached),
                     cache_object_bytes(prefilled),
                     cached, uncached)


def memory_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes per second this machine streams through memory: best of `repeats` copies of a buffer
    much larger than any cache (bytes read + bytes written, over the time)."""
    source = torch.ones(megabytes * 1024 * 1024 // 4, dtype=torch.float32)
    target = torch.empty_like(source)
    target.copy_(source)
    best = min(_time_once(lambda: target.copy_(source)) for _ in range(repeats))
    return 2 * source.nbytes / best


def _time_once(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bandwidth_bound_ms(loaded: Loaded, context: int, bandwidth: float) -> float:
    """The least time a cached decode step can take if it only had to read every weight it uses
    and the cache once: (weight bytes + cache bytes) ÷ bandwidth. A step slower than this by a
    large factor is bound by something else (kernel overheads, compute)."""
    layer_weights, head_weights = matmul_weights(loaded)
    element = next(loaded.model.parameters()).element_size()
    weight_bytes = (layer_weights + head_weights) * element
    kv = model_cache_bytes(loaded.config, context, loaded.dtype)["held"]
    return 1e3 * (weight_bytes + kv) / bandwidth
