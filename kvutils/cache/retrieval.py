"""Long-range retrieval under a cache operation: does the model still find a key far back?

Each prompt (`kvutils.core.haystack`: a key hidden at a depth of a long haystack, a question, the
key as the answer) is prefilled once, exactly; that one prefill serves every operation and both
regimes, which differ in what the operation compresses:
- `agnostic`: the haystack alone, before the question arrives (prompt caching and multi-turn reuse;
  kvpress's default pipeline). The question and the answer are then teacher-forced through the
  compressed cache. Its prefill is the first positions of the shared one (`prefilled.head`);
- `aware`: the haystack and the question (SnapKV's own setting): the prefill runs to the question's
  last token, which is fed first, then the answer.
The answer is scored by the teacher-forced scorer's own paths (`kvutils.cache.scoring`): the fast
path (one forward) where the operation has one, the presses together in one batched forward
(`kvutils.cache.fast_batched`), the batched step path for decode-time policies and transformers'
cache objects. Per prompt and operation:
- `correct`: every token of the key is the argmax after the tokens before it, the answer's leading
  separator (a space; the model may prefer a quote) given. Greedy decoding reads the same cache as
  teacher forcing for as long as the tokens agree, so this is greedy decoding writing the key
  exactly once the separator is written, found without decoding;
- `key_logprob`: the log-probability of the key's tokens (after the separator), summed, in nats;
- `needle_kept` (`needle_kept`): per layer and KV head, the share of the needle's entries the cache
  still lets the query that writes the key's first digit read (what a press or policy kept after
  the prefill, what a window's positions allow, capped by the layer's own sliding window).
Presses and decode-time policies decide from what the prefill saw layer by layer, every method and
both regimes from one computation of each layer's attention weights (`prefilled.Remembered`).
"""
from __future__ import annotations

import dataclasses
import time

import torch
from tqdm.auto import tqdm

from kvutils.cache.base import CACHE_OBJECT, POLICY
from kvutils.cache.fast_batched import batchable, score_presses
from kvutils.cache.fast_path import score_fast
from kvutils.cache.methods.exact import Exact
from kvutils.cache.methods.hf_quantized import refusal
from kvutils.cache.methods.press import Press, top_mask
from kvutils.cache.prefilled import LayerView, Prefilled, exact_prefill, head, remembered
from kvutils.cache.registry import parse_ops
from kvutils.cache.scoring import STEP_BATCH, score_step_many
from kvutils.cache.sizes import cache_bytes, kept_bytes
from kvutils.cache.step_batched import StepStart, step_start
from kvutils.core.haystack import Prompt
from kvutils.models.layers import kv_shape, layer_windows
from kvutils.models.loading import Loaded

REGIMES = ("agnostic", "aware")
# the step path (decode-time policies, transformers' cache objects) scores turn 1 only: one forward per token,
# so a conversation's follow-ups cost it 3-4x turn 1 (tova: 0.5 -> 3.4 s per prompt on tiny-llama at 512
# tokens), against 2x on the fast path; a policy also re-decides at every token, so "compressed once" is not
# its case
STEP_FOLLOWUPS = ("not scored: the step path (a decode-time policy, a cache object) scores turn 1 alone, for "
                  "cost")
REGIME_MEANING = {"agnostic": "compressed before the question arrives (query-agnostic: prompt caching, "
                              "multi-turn reuse)",
                  "aware": "compressed with the question in the prefill (query-aware: SnapKV's setting)"}


def prefill_length(prompt: Prompt, regime: str) -> int:
    """Tokens the operation compresses: the haystack (agnostic), or all but the question's last
    token (aware)."""
    return prompt.question if regime == "agnostic" else prompt.answer - 1


def answer_record(logits: torch.Tensor, prompt: Prompt) -> dict:
    """`correct` and `key_logprob` from the logits (A, vocab) that predict the answer's A tokens:
    the key's tokens after the first, the separator (a space) the answer starts with, which the
    model may write otherwise (a quote) without missing the key."""
    target = torch.tensor(prompt.ids[prompt.answer + prompt.key_from:])  # (A - key_from,) the key's digits
    logp = logits[-len(target):].double().log_softmax(-1)
    target = target.to(logp.device)
    return {"depth": prompt.depth, "context": prompt.context,
            "correct": bool((logp.argmax(-1) == target).all()),
            "key_logprob": float(logp.gather(-1, target[:, None]).sum())}


def answer_rows(prompt: Prompt) -> torch.Tensor:
    """(answers,) the chain positions whose tokens are answers: turn 1's, then each follow-up's."""
    return torch.cat([torch.arange(t.answer, len(t.ids)) for t in (prompt, *prompt.followups)])


def keep_rows(prompt: Prompt, prefill: int) -> int | torch.Tensor:
    """What the scorers' `last` keeps after a prefill of `prefill` tokens: the answer's rows
    (an int, as for one question), or every turn's answer rows by index (decode rows predict the
    token after theirs)."""
    return prompt.answer_length if not prompt.followups else answer_rows(prompt) - 1 - prefill


def turn_records(logits: torch.Tensor, prompt: Prompt) -> tuple[dict, list[dict]]:
    """(turn 1's record, each follow-up's) from the logits predicting `answer_rows(prompt)`; a
    follow-up's record also names its turn (2, 3, ...)."""
    if not prompt.followups:
        return answer_record(logits, prompt), []
    at, out = 0, []
    for t in (prompt, *prompt.followups):
        n = len(t.ids) - t.answer
        out.append(answer_record(logits[at:at + n], t))
        at += n
    return out[0], [{**r, "turn": i} for i, r in enumerate(out[1:], start=2)]


def needle_kept(config, op, prompt: Prompt, decided) -> list[list[float]]:
    """(layers, kv_heads) shares of the needle's entries [start, end) that the query writing the
    key's first digit can read: a press's or policy's kept set after the prefill (`decided`, per
    layer (kv_heads, prefill) bool, or a policy's start states), else what the operation's positions
    keep (`op.keeps`: a window, the exact cache, the precision rows), and on a sliding-attention
    layer only the entries within its window."""
    start, end = prompt.needle
    query = prompt.answer + prompt.key_from - 1
    slots = torch.arange(start, end)  # (needle,)
    windows = layer_windows(config)
    if decided is not None:
        held = [d["held"] for d in decided] if op.kind == POLICY else decided
        kept = [h[:, start:end] for h in held]  # per layer (kv_heads, needle)
    else:
        by_position = op.keeps(slots, torch.tensor([query]))[0]  # (needle,)
        kept = [by_position.expand(kv_shape(config)[0], -1)] * len(windows)
    out = []
    for k, window in zip(kept, windows):
        if window:
            k = k & ((query - slots) < window)
        out.append([round(float(x), 4) for x in k.float().mean(-1)])
    return out


def lost_by_construction(shares: list[list[float]]) -> bool:
    """No layer or KV head can read any of the needle's entries: the key's digits are not in the
    cache (what later entries computed from them in the exact prefill may still carry)."""
    return not any(x > 0 for layer in shares for x in layer)


def _decide(op, view: LayerView, scored: dict):
    """One layer's decision: a policy's start state, or a press's kept set; a press that ranks
    entries by `score` alone scores them once for all its levels (the scores do not depend on
    `compression_ratio`, only the number kept does), memoised in `scored`."""
    if op.kind == POLICY:
        return op.start(view)
    if type(op).decide is not Press.decide:  # a press that moves its budget between heads (AdaKV)
        return op.decide([view])[0]
    key = dataclasses.replace(op, compression_ratio=0.0)
    if key not in scored:
        scored[key] = op.score(view)
    return top_mask(scored[key], op.budget(view))


def decide_layerwise(ops: list, views: dict[str, list[LayerView]]) -> tuple[dict, dict]:
    """What every press keeps and every decode-time policy starts from, per regime, layer by layer
    (each layer's attention weights computed once for every method and regime, then dropped; a
press's scores computed once for all its levels).
    Returns ({regime: {spec: per-layer decision}}, {spec: seconds})."""
    out = {r: {op.spec: [] for op in ops} for r in views}
    seconds = {op.spec: 0.0 for op in ops}
    n_layers = len(next(iter(views.values())))
    for i in range(n_layers):
        for regime, layer_views in views.items():
            scored = {}  # one layer and regime: a press's scores, shared by its levels
            for op in ops:
                t0 = time.perf_counter()
                out[regime][op.spec].append(_decide(op, layer_views[i], scored))
                seconds[op.spec] += time.perf_counter() - t0
        for layer_views in views.values():
            forget = getattr(layer_views[i].attention, "forget", None)
            if forget is not None:
                forget()
    return out, seconds


def _held_bytes(loaded: Loaded, op, decided, stats: dict, prefill: int) -> float:
    if "cache_bytes" in stats:
        return stats["cache_bytes"]
    if decided is not None:
        held = [d["held"] for d in decided] if op.kind == POLICY else decided
        return kept_bytes(loaded.config, held, loaded.dtype)
    return cache_bytes(loaded.config, op, prefill, loaded.dtype)


class _Scores:
    """Per operation and regime, one record, the bytes held after the prefill and the needle's kept
    shares per prompt."""

    def __init__(self, ops: list, regimes: tuple[str, ...], n: int):
        self.records = {op.spec: {r: [None] * n for r in regimes} for op in ops}
        self.held = {op.spec: {r: [None] * n for r in regimes} for op in ops}
        self.needle = {op.spec: {r: [None] * n for r in regimes} for op in ops}
        self.followups = {op.spec: {r: [[] for _ in range(n)] for r in regimes} for op in ops}
        self.followup_needle = {op.spec: {r: [[] for _ in range(n)] for r in regimes} for op in ops}
        self.exact_followups = [[] for _ in range(n)]
        self.seconds = {op.spec: 0.0 for op in ops}


@torch.inference_mode()
def score_retrieval(loaded: Loaded, ops, prompts: list[Prompt], regimes: tuple[str, ...] = REGIMES,
                    progress: bool = True, give_up=None) -> dict:
    """Every operation on every prompt in each regime. Returns {"exact": [record per prompt],
    "ops": {spec: {regime: {"per_prompt": [...], "held_bytes": [...], "needle_kept": [...]}}},
    "seconds": {spec: s},
    "exact_seconds", "refused": {spec: why}, "gave_up": bool} (a record: depth, context, correct,
    key_logprob). `give_up(exact records so far)` True: the operations are not scored on the
    prompts left (only the exact cache is), and "gave_up" says so."""
    ops = parse_ops(ops)
    refused = {op.spec: why for op in ops if op.kind == CACHE_OBJECT and (why := refusal(loaded.config, op))}
    scored = [op for op in ops if op.spec not in refused]
    for op in scored:
        op.check_model(loaded.config)
    deciders = [op for op in scored if op.needs_views]
    scores = _Scores(scored, regimes, len(prompts))
    exact, exact_seconds, gave_up = [], 0.0, False
    with tqdm(total=len(prompts), desc=f"retrieval {loaded.name}", disable=not progress,
              unit="prompt") as bar:
        for group in range(0, len(prompts), STEP_BATCH):
            pending: dict[tuple[str, str], list] = {}
            for p in range(group, min(group + STEP_BATCH, len(prompts))):
                gave_up = gave_up or (give_up is not None and give_up(exact))
                t0 = time.perf_counter()
                exact.append(_score_prompt(loaded, [] if gave_up else scored, [] if gave_up else deciders,
                                           prompts[p], p,
                                           regimes, scores, pending))
                exact_seconds += time.perf_counter() - t0
                bar.update()
            _score_pending(loaded, scored, prompts, pending, scores)
    return {"exact": exact, "exact_seconds": round(exact_seconds, 3), "refused": refused, "gave_up": gave_up,
            "seconds": {k: round(v, 3) for k, v in scores.seconds.items()},
            "exact_followups": scores.exact_followups,
            "ops": {op.spec: {r: {"per_prompt": scores.records[op.spec][r],
                                  "held_bytes": scores.held[op.spec][r],
                                  "needle_kept": scores.needle[op.spec][r],
                                  "followups": scores.followups[op.spec][r],
                                  "followup_needle_kept": scores.followup_needle[op.spec][r]}
                              for r in regimes} for op in scored}}


def _score_prompt(loaded: Loaded, scored: list, deciders: list, prompt: Prompt, p: int, regimes,
                  scores: _Scores,
                  pending: dict) -> dict:
    """One prompt: the shared exact prefill, the exact record (returned), every fast-path operation
    scored and every step-path one's start queued in `pending`."""
    ids = torch.tensor(prompt.chain)  # (context + follow-ups,)
    longest = prompt.answer - 1
    pre = exact_prefill(loaded, ids[None, :longest], views=bool(deciders))
    if deciders:
        pre = Prefilled(pre.kv, remembered(pre.views))
    exact, scores.exact_followups[p] = turn_records(
        score_fast(loaded, Exact(), ids, longest, len(ids) - 1 - longest, pre,
                   last=keep_rows(prompt, longest)), prompt)
    regime_pre = {r: pre if prefill_length(prompt, r) == longest else head(pre, prefill_length(prompt, r))
                  for r in regimes}
    decided, decide_seconds = decide_layerwise(deciders, {r: v.views for r, v in regime_pre.items()}) \
        if deciders else ({r: {} for r in regimes}, {})
    for spec, s in decide_seconds.items():
        scores.seconds[spec] += s
    for regime, pre_r in regime_pre.items():
        P = prefill_length(prompt, regime)
        D = len(ids) - 1 - P
        together = [op for op in scored if batchable(op)]
        if together:  # one batched forward for the presses; each is charged an equal share of its time
            t0 = time.perf_counter()
            logits = score_presses(loaded, ids, P, D, pre_r, [decided[regime][op.spec] for op in together],
                                   last=keep_rows(prompt, P))
            share = (time.perf_counter() - t0) / len(together)
            for op, rows in zip(together, logits):
                scores.records[op.spec][regime][p], scores.followups[op.spec][regime][p] = turn_records(
                    rows, prompt)
                scores.seconds[op.spec] += share
        for op in scored:
            t0 = time.perf_counter()
            stats, choice = {}, decided[regime].get(op.spec)
            if op.has_fast_path and not batchable(op):
                logits = score_fast(loaded, op, ids, P, D, pre_r, stats, decided=choice,
                                    last=keep_rows(prompt, P))
                scores.records[op.spec][regime][p], scores.followups[op.spec][regime][p] = turn_records(
                    logits, prompt)
            elif op.kind == POLICY:
                # the steps copy what they read
                start = StepStart(pre_r.kv, [s["held"] for s in choice], choice)
                pending.setdefault((op.spec, regime), []).append((p, start))
            elif op.kind == CACHE_OBJECT:  # filled through its own update
                pending.setdefault((op.spec, regime), []).append((p, step_start(loaded, op, ids, P, pre_r,
                                                                                stats)))
            scores.held[op.spec][regime][p] = _held_bytes(loaded, op, choice, stats, P)
            scores.needle[op.spec][regime][p] = needle_kept(loaded.config, op, prompt, choice)
            scores.followup_needle[op.spec][regime][p] = [needle_kept(loaded.config, op, f, choice)
                                                          for f in prompt.followups]
            scores.seconds[op.spec] += time.perf_counter() - t0
    return exact


def _score_pending(loaded: Loaded, scored: list, prompts: list[Prompt], pending: dict,
                   scores: _Scores) -> None:
    """The step-path operations of a group of prompts, decoded together where their lengths agree."""
    by_spec = {op.spec: op for op in scored}
    for (spec, regime), items in pending.items():
        lengths: dict[tuple[int, int], list] = {}
        for p, start in items:
            P = prefill_length(prompts[p], regime)
            lengths.setdefault((P, len(prompts[p].ids) - 1 - P), []).append((p, start))
        for (P, D), same in lengths.items():
            t0 = time.perf_counter()
            # (docs, context): turn 1 alone
            ids = torch.stack([torch.tensor(prompts[p].ids) for p, _ in same])
            # (docs, D, vocab)
            logits = score_step_many(loaded, by_spec[spec], ids, P, D, [s for _, s in same])
            for (p, _), rows in zip(same, logits):
                scores.records[spec][regime][p] = answer_record(rows, prompts[p])
                scores.followup_needle[spec][regime][p] = []  # follow-ups not scored (STEP_FOLLOWUPS)
            scores.seconds[spec] += time.perf_counter() - t0
