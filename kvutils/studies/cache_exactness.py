"""Chapter 1: is decoding with the KV cache an exact substitute for recomputation?

Two measurements, both on any causal model:
- `compare_decoding`: greedy decoding with the cache vs without it, step by step (E1);
- `compare_prefixes`: a prefix's cached K/V under two different continuations, and alone vs
  inside a longer sequence (E2, causal side).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

from kvutils.core import checks, data, results
from kvutils.core.data import PrefixPair
from kvutils.models.checks import check_models
from kvutils.models.greedy import greedy, prefill, recompute_logits
from kvutils.models.loading import DTYPES, Loaded, load_tokenizer
from kvutils.studies.parameters.chapter1 import RECOMPUTE_MODES, Chapter1Parameters


def worst(values) -> float:
    """The largest of some differences, NaN if any is NaN. Python's max() is NaN-blind (max(0.0, nan)
    is 0.0, and `nan > tol` is False), so an identity check built on it would pass on NaN logits."""
    values = [float(v) for v in values]
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


def _first_divergence(cached_tokens: torch.Tensor, recompute_tokens: torch.Tensor) -> torch.Tensor:
    """Per row, the first step whose tokens differ (= number of steps if none)."""
    differ = cached_tokens != recompute_tokens  # (batch, steps)
    steps = differ.shape[-1]
    first = torch.where(differ.any(-1), differ.float().argmax(-1), torch.full_like(differ[:, 0], steps,
                                                                                   dtype=torch.long))
    return first.long()


@torch.inference_mode()
def compare_decoding(loaded: Loaded, prompts: torch.Tensor, new_tokens: int,
                     recompute: str = "one_pass", batch_size: int = 8) -> dict:
    """Greedy-decode every prompt (n, prompt_len) with and without the cache and compare.

    recompute="per_step": the no-cache side regenerates from scratch at every step (the article's
    procedure; cost grows with the square of the length). recompute="one_pass": the no-cache logits
    of all steps come from one full forward over prompt + the cached run's tokens; a step's
    no-cache greedy token is the argmax there, so the two runs agree up to the first step whose
    argmax differs.

    Logits are compared only while both runs have seen the same tokens (through the first
    divergent step): after that they condition on different text. `argmax_agreement_pct` counts
    those steps; `argmax_agreement_all_steps_pct` counts every generated step of every prompt, as
    the article reports it ("on 100% of positions"), whatever text each side had read by then.
    """
    if recompute not in RECOMPUTE_MODES:
        raise ValueError(f"recompute: {recompute!r} not allowed; choose one of {RECOMPUTE_MODES}")
    prompt_len = prompts.shape[-1]
    identical, agree, compared, agree_all = 0, 0, 0, 0
    max_diff, per_step_max = 0.0, torch.zeros(new_tokens, dtype=torch.float64)
    stds, first_divergence = [], []
    started = time.perf_counter()
    for start in tqdm(range(0, len(prompts), batch_size), desc=f"{loaded.name} {loaded.dtype} decode",
                      unit="batch"):
        batch = prompts[start:start + batch_size]
        cached_tokens, cached_logits = greedy(loaded, batch, new_tokens, use_cache=True)
        if recompute == "per_step":
            recompute_tokens, recompute_step_logits = greedy(loaded, batch, new_tokens, use_cache=False)
        else:
            sequence = torch.cat([batch.to(cached_tokens.device), cached_tokens], dim=-1)
            recompute_step_logits = recompute_logits(loaded, sequence, prompt_len)
            recompute_tokens = recompute_step_logits.argmax(-1)
        first = _first_divergence(cached_tokens, recompute_tokens).cpu()
        steps = torch.arange(new_tokens)
        common = steps[None, :] <= first[:, None]  # same context in both runs
        diff = (cached_logits - recompute_step_logits).abs().amax(-1).double().cpu()  # (batch, steps)
        diff = torch.where(common, diff, torch.zeros_like(diff))
        max_diff = worst([max_diff, diff.max().item()])  # torch's max keeps a NaN, Python's would not
        per_step_max = torch.maximum(per_step_max, diff.amax(0))
        same_argmax = cached_logits.argmax(-1).cpu() == recompute_step_logits.argmax(-1).cpu()
        agree += (same_argmax & common).sum().item()
        agree_all += same_argmax.sum().item()
        compared += common.sum().item()
        identical += (first == new_tokens).sum().item()
        first_divergence += first.tolist()
        stds.append(cached_logits.double().std(-1).flatten().cpu())
    return {
        "n_prompts": len(prompts), "prompt_tokens": prompt_len, "new_tokens": new_tokens,
        "recompute": recompute, "identical": identical, "max_logit_diff": max_diff,
        "median_logit_std": torch.cat(stds).median().item(),
        "argmax_agreement_pct": 100.0 * agree / compared, "steps_compared": compared,
        "argmax_agreement_all_steps_pct": 100.0 * agree_all / (len(prompts) * new_tokens),
        "first_divergence": first_divergence, "per_step_max_logit_diff": per_step_max.tolist(),
        "seconds_per_prompt": (time.perf_counter() - started) / len(prompts),
    }


@dataclass
class PrefixIds:
    prefix: torch.Tensor  # (1, prefix_len)
    continued: tuple[torch.Tensor, torch.Tensor]  # (1, prefix_len + continuation_len) each


def tokenize_pair(tokenizer, pair: PrefixPair) -> PrefixIds:
    """Token ids of the prefix and of prefix + each continuation. The continuation is tokenised on
    its own and appended, so the prefix's tokens are literally the same in all three sequences."""
    prefix = tokenizer(pair.prefix, add_special_tokens=True).input_ids
    conts = [tokenizer(c, add_special_tokens=False).input_ids for c in pair.continuations]
    return PrefixIds(torch.tensor([prefix]), tuple(torch.tensor([prefix + c]) for c in conts))


@torch.inference_mode()
def compare_prefixes(loaded: Loaded, pairs: list[PrefixPair]) -> dict:
    """For each prefix: are its cached K/V bit-identical under both continuations (every layer),
    and how far do they move between the prefix alone and the prefix inside a longer sequence?

    Layers that hold only a recent window (sliding attention) are compared where they still hold
    the prefix; `layers_compared` says how many did.
    """
    n_layers = loaded.n_layers
    alone_key = torch.zeros(n_layers, dtype=torch.float64)  # per layer, max over items
    alone_value = torch.zeros(n_layers, dtype=torch.float64)
    across_key = torch.zeros(n_layers, dtype=torch.float64)
    items, max_abs_value = [], 0.0
    for pair in tqdm(pairs, desc=f"{loaded.name} {loaded.dtype} prefixes", unit="prefix"):
        ids = tokenize_pair(loaded.tokenizer, pair)
        plen = ids.prefix.shape[-1]
        alone = prefill(loaded, ids.prefix)
        first, second = (prefill(loaded, c) for c in ids.continued)
        bit_identical, across_max, alone_max, compared = True, 0.0, 0.0, 0
        for layer, (a, b, c) in enumerate(zip(alone, first, second)):
            kv_a, kv_b, kv_c = (x.positions(0, plen) for x in (a, b, c))
            if kv_a is None or kv_b is None or kv_c is None:
                continue
            compared += 1
            (ka, va), (kb, vb), (kc, vc) = kv_a, kv_b, kv_c
            bit_identical &= torch.equal(kb, kc) and torch.equal(vb, vc)  # False on NaN, as it must be
            key_across = (kb - kc).abs().max().item()
            across_max = worst([across_max, key_across, (vb - vc).abs().max().item()])
            across_key[layer] = worst([across_key[layer].item(), key_across])
            k_alone = worst([(ka - kb).abs().max().item(), (ka - kc).abs().max().item()])
            v_alone = worst([(va - vb).abs().max().item(), (va - vc).abs().max().item()])
            alone_key[layer] = worst([alone_key[layer].item(), k_alone])
            alone_value[layer] = worst([alone_value[layer].item(), v_alone])
            alone_max = worst([alone_max, k_alone])
            max_abs_value = worst([max_abs_value, va.abs().max().item()])
        items.append({"item": pair.name, "prefix_tokens": plen, "layers_compared": compared,
                      "bit_identical": bool(bit_identical), "max_diff_across_continuations": across_max,
                      "max_key_diff_alone_vs_inside": alone_max})
    return {
        "n_prefixes": len(pairs),
        "bit_identical": sum(i["bit_identical"] for i in items),
        "max_diff_across_continuations": worst(i["max_diff_across_continuations"] for i in items),
        "max_key_diff_alone_vs_inside": alone_key.max().item(),
        "max_value_diff_alone_vs_inside": alone_value.max().item(),
        "max_abs_cached_value": max_abs_value,
        "per_layer_max_key_diff_alone_vs_inside": alone_key.tolist(),
        "per_layer_max_key_diff_across_continuations": across_key.tolist(),
        "items": items,
    }


# --------------------------------------------------------------------------- the chapter's run


@dataclass
class Plan:
    """Validated chapter-1 parameters: everything a run needs except the weights."""

    models: list[str]
    dtypes: list[str]
    prompts: dict[str, torch.Tensor]  # per model, (n_prompts, prompt_tokens) ids for its tokenizer
    pairs: list[PrefixPair]
    new_tokens: int
    recompute: str
    batch_size: int
    device: str
    per_step_prompts: int = 0  # the first prompts also decoded by the article's per-step procedure


def plan(p: Chapter1Parameters) -> Plan:
    """Prepare chapter 1's inputs from its checked parameters, loading tokenizers but no model.
    Raises ValueError / ModelNotAvailable naming the parameter."""
    resolved = check_models("models", p.models, family="causal", min_context=p.prompt_tokens + p.new_tokens)
    docs = data.load_corpus(p.corpus)
    data.check_corpus_size(docs, p.n_prompts)
    words = data.load_senses(p.senses_file)
    pairs = data.prefix_pairs(words, data.load_garden_paths(p.garden_paths_file))
    prompts = {}
    for r in resolved:
        tokenizer = load_tokenizer(r.name)
        prompts[r.name] = data.prompts_from_corpus(tokenizer, docs, p.n_prompts, p.prompt_tokens)
    # a per-step subset beside a per-step run would measure the same thing twice
    subset = 0 if p.recompute == "per_step" else min(p.per_step_prompts, p.n_prompts)
    return Plan([r.name for r in resolved], checks.check_list("dtypes", p.dtypes, DTYPES), prompts, pairs,
                p.new_tokens,
                p.recompute, p.batch_size, p.device, subset)


def run(p: Plan) -> tuple[dict, list[dict]]:
    """Both measurements for every model and dtype. Returns (numbers, model descriptions);
    numbers[model][dtype] = {"decode": ..., "prefixes": ...}, plus "decode_per_step" (the article's
    procedure on the first `per_step_prompts` prompts) where that subset is asked for."""
    from kvutils.models.loading import load

    numbers, described = {}, []
    for name in p.models:
        numbers[name] = {}
        for dtype in p.dtypes:
            loaded = load(name, dtype, device=p.device)
            if dtype == p.dtypes[0]:
                described.append(loaded.describe())
            numbers[name][dtype] = {
                "decode": compare_decoding(loaded, p.prompts[name], p.new_tokens, p.recompute, p.batch_size),
                "prefixes": compare_prefixes(loaded, p.pairs),
            }
            if p.per_step_prompts:
                numbers[name][dtype]["decode_per_step"] = compare_decoding(
                    loaded, p.prompts[name][:p.per_step_prompts], p.new_tokens, "per_step", p.batch_size)
            del loaded
    return numbers, described


def compute(p: Chapter1Parameters, folder, unit) -> None:
    """Chapter 1's unit of computation (kvutils.studies.units): both measurements, written to its
    results file."""
    started = time.time()
    numbers, described = run(plan(p))
    results.save_results(folder, p.NOTEBOOK, p.as_dict(), described, results.as_written(numbers), started)
