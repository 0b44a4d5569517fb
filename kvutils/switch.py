"""Chapter 5: switch to a LoRA tail mid-sequence — train it, switch under four cache policies,
and patch the cache to see where the adapter reads the sense.

The task after the marker: `"The <word><continuation>" + marker` -> the sense label (" river").
Adapters train on the contexts and reference sentences of `train_words` and are scored on those of
`heldout_words`. `plan()` checks every parameter and tokenises everything before any model loads
(L and the architecture come from the model's config); `run(plan)` returns (numbers, described).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
from tqdm import tqdm

from . import data, lora, models, params
from .models import load, load_tokenizer

DEFAULT_TRAIN_WORDS = "bank,bat,pitcher,mouse,spring,seal,plant,match,organ,pen,bark,palm"
DEFAULT_HELDOUT_WORDS = "key,cell,club,fan"
TOLERANCE = {"float32": 1e-4, "float64": 1e-9}  # tail patch vs recompute: logits and K/V
CONTINUATION_BINS = 4  # rows of the patch map: the continuation in quarters, by relative position
EVAL_BATCH = 32


@dataclass
class Example:
    word: str
    sense: int
    kind: str  # "context" ("The <word><continuation>") or "reference"
    ids: list[int]  # the text's tokens, then the marker's
    target: int  # the sense label's token
    other: int  # the other sense's label token


@dataclass
class ModelPlan:
    name: str
    model_type: str
    n_layers: int
    k_values: list[int]
    activated_k: int
    patch_k: int
    marker_ids: list[int]
    train: list[Example]
    heldout: list[Example]
    prefix_tokens: list[str]  # the shared "The <word>" tokens, the word shown as ⟨word⟩
    bench_ids: torch.Tensor  # (1, bench_tokens): the long prefix of the cost benchmark


@dataclass
class Plan:
    models: list[ModelPlan]
    rank: int
    alpha: float
    targets: list[str]
    steps: int
    lr: float
    batch_size: int
    seed: int
    dtype: str
    device: str
    timing_repeats: int
    patch_layer_groups: int


# --------------------------------------------------------------------------- checking the parameters


def model_config(name: str, resolved: models.Resolved):
    """The (text) config of a model, from its config file alone: no weights load."""
    from transformers import AutoConfig

    if resolved.kind == "tiny":
        tiny = models.TINY[name]
        config = AutoConfig.for_model(tiny.model_type, **tiny.config)
    else:
        path = models.converted_dir(name) if resolved.kind == "embedded" else resolved.path
        config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    return getattr(config, "text_config", None) or config


def parse_k(value, n_layers: int, name: str, parameter: str) -> int:
    """An int, or "L" (every layer)."""
    if value == "L":
        return n_layers
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    return lora.check_k(value, n_layers, name, parameter)


def parse_k_values(text: str, n_layers: int, name: str) -> list[int]:
    items = params.split_items("k_values", text, example="1,2,4,L")  # papermill passes `-p k_values 4` as 4
    return sorted({parse_k(item, n_layers, name, "k_values") for item in items})


def split_words(words: list[data.Word], train_words: str, heldout_words: str) -> tuple[list, list]:
    known = {w.word: w for w in words}
    chosen = {}
    for parameter, text in (("train_words", train_words), ("heldout_words", heldout_words)):
        names = [n.strip() for n in text.split(",") if n.strip()] if isinstance(text, str) else None
        if not names:
            raise ValueError(f"{parameter} must name at least one word of the senses file, comma-separated")
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"{parameter}: {', '.join(map(repr, unknown))} not in the senses file; "
                             f"choose from {', '.join(known)}")
        chosen[parameter] = names
    overlap = sorted(set(chosen["train_words"]) & set(chosen["heldout_words"]))
    if overlap:
        raise ValueError(f"train_words and heldout_words overlap ({', '.join(overlap)}): a held-out word "
                         "must never be trained on, or its accuracy measures memory, not the skill")
    return [known[n] for n in chosen["train_words"]], [known[n] for n in chosen["heldout_words"]]


def _label_token(tokenizer, word: data.Word, sense: data.Sense, name: str) -> int:
    ids = tokenizer(" " + sense.label, add_special_tokens=False).input_ids
    if len(ids) != 1:
        raise ValueError(f"senses_file: the label {sense.label!r} of {word.word!r} is {len(ids)} tokens for "
                         f"{name}; the answer must be one token (choose a one-token label)")
    return ids[0]


def build_examples(tokenizer, words: list[data.Word], marker_ids: list[int], name: str) -> list[Example]:
    out = []
    for w in words:
        labels = [_label_token(tokenizer, w, s, name) for s in w.senses]
        for s, sense in enumerate(w.senses):
            texts = [("context", w.prefix + sense.continuation)] + [("reference", r) for r in sense.references]
            for kind, text in texts:
                ids = tokenizer(text, add_special_tokens=True).input_ids + marker_ids
                out.append(Example(w.word, s, kind, ids, labels[s], labels[1 - s]))
    return out


def check_contexts(examples: list[Example], tokenizer, prefix_len: int, m: int, name: str) -> None:
    """Both contexts of a word must start with the same prefix tokens ("The <word>") — the patch
    map's control rows rely on it — and share at least CONTINUATION_BINS continuation tokens."""
    problems = []
    contexts: dict[str, list[Example]] = {}
    for e in examples:
        if e.kind == "context":
            contexts.setdefault(e.word, []).append(e)
    for word, (a, b) in contexts.items():
        if a.ids[:prefix_len] != b.ids[:prefix_len] or len(tokenizer("The " + word).input_ids) != prefix_len:
            problems.append(f"{word!r}: 'The {word}' is not the same {prefix_len} tokens at the start of both contexts")
        if min(len(a.ids), len(b.ids)) - m - prefix_len < CONTINUATION_BINS:
            problems.append(f"{word!r}: a continuation is shorter than {CONTINUATION_BINS} tokens")
    if problems:
        raise ValueError(f"senses_file: contexts unusable with {name}:\n  " + "\n  ".join(problems))


def plan(*, models: str, k_values: str, rank: int, alpha: float, steps: int, lr: float, train_words: str,
         heldout_words: str, seed: int, senses_file: str, marker: str, targets: str, batch_size: int,
         activated_k, patch_k, patch_layer_groups: int, bench_tokens: int, timing_repeats: int,
         dtype: str, device: str, **_ignored) -> Plan:
    """Check every parameter of chapter 5 and tokenise every example; loads tokenizers and config
    files only. Raises ValueError / ModelNotAvailable naming the parameter and what is allowed."""
    params.check_device(device)
    params.check_choice("dtype", dtype, list(TOLERANCE))
    params.check_int("rank", rank, 1)
    params.check_int("steps", steps, 1)
    params.check_int("batch_size", batch_size, 1)
    params.check_int("seed", seed, 0)
    params.check_int("patch_layer_groups", patch_layer_groups, 1)
    params.check_int("bench_tokens", bench_tokens, 8)
    params.check_int("timing_repeats", timing_repeats, 1)
    for name, value in (("alpha", alpha), ("lr", lr)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ValueError(f"{name} must be a number > 0, got {value!r}")
    target_list = lora.parse_targets(targets)
    words = data.load_senses(senses_file)
    train, heldout = split_words(words, train_words, heldout_words)
    docs = data.load_corpus()
    plans = []
    for r in params.check_models("models", models, family="causal"):
        config = model_config(r.name, r)
        lora.family_of(config.model_type, r.name)  # an unknown architecture fails here
        n_layers = config.num_hidden_layers
        ks = parse_k_values(k_values, n_layers, r.name)
        act_k = parse_k(activated_k, n_layers, r.name, "activated_k")
        p_k = parse_k(patch_k, n_layers, r.name, "patch_k")
        if p_k not in ks:
            raise ValueError(f"patch_k: {patch_k!r} (k={p_k}) is not one of the trained k_values {ks} of {r.name}")
        if patch_layer_groups > n_layers:
            raise ValueError(f"patch_layer_groups must be between 1 and {n_layers} (the layers of {r.name}), "
                             f"got {patch_layer_groups}")
        tokenizer = load_tokenizer(r.name)
        data.check_words_for_tokenizer(train + heldout, tokenizer, r.name)
        texts = [w.prefix + s.continuation for w in train + heldout for s in w.senses]
        texts += [ref for w in train + heldout for s in w.senses for ref in s.references]
        marker_ids = lora.check_marker(tokenizer, texts, marker, r.name)
        prefix = tokenizer(train[0].prefix).input_ids
        tokens = [t.replace("Ġ", " ").replace("▁", " ") for t in tokenizer.convert_ids_to_tokens(prefix)]
        examples = {split: build_examples(tokenizer, ws, marker_ids, r.name) for split, ws in
                    (("train", train), ("heldout", heldout))}
        check_contexts(examples["train"] + examples["heldout"], tokenizer, len(prefix), len(marker_ids), r.name)
        bench = data.prompts_from_corpus(tokenizer, docs, 1, bench_tokens, parameter="bench_tokens")
        plans.append(ModelPlan(r.name, config.model_type, n_layers, ks, act_k, p_k, marker_ids,
                               examples["train"], examples["heldout"],
                               tokens[:-1] + ["⟨word⟩"], bench))
    return Plan(plans, rank, float(alpha), target_list, steps, float(lr), batch_size, seed, dtype, device,
                timing_repeats, patch_layer_groups)


# --------------------------------------------------------------------------- training and accuracy


def _batch(examples: list[Example], pad_id: int, marker_len: int, device: str) -> tuple[lora.Batch, torch.Tensor]:
    ids, mask = lora.left_pad([e.ids for e in examples], pad_id)
    batch = lora.Batch(ids.to(device), mask.to(device), torch.tensor([e.target for e in examples], device=device),
                       marker_len)
    return batch, torch.tensor([e.other for e in examples], device=device)


@torch.no_grad()
def accuracy(model, adapter: str | None, boundary: torch.Tensor, batch: lora.Batch, others: torch.Tensor,
             start: int, activated: bool = False) -> dict:
    """Sense accuracy (the right label's logit above the other sense's: chance 50%) and label
    accuracy (the right label is the top-1 token of the whole vocabulary), in %. `adapter` None:
    the base model."""
    with lora.active_adapter(model, adapter):
        return _accuracy(model, boundary, batch, others, start, activated)


def _accuracy(model, boundary, batch, others, start, activated) -> dict:
    right = top1 = 0
    for a in range(0, len(others), EVAL_BATCH):
        rows = slice(a, a + EVAL_BATCH)
        offsets = [batch.marker_len] * len(others[rows]) if activated else None
        logits = lora.tail_logits(model, boundary[rows], batch.mask[rows], start, offsets)
        target, other = batch.targets[rows], others[rows]
        margin = logits.gather(1, target[:, None]) - logits.gather(1, other[:, None])
        right += int((margin > 0).sum())
        top1 += int((logits.argmax(-1) == target).sum())
    n = len(others)
    return {"sense_pct": 100 * right / n, "label_top1_pct": 100 * top1 / n, "n": n}


def _train_all(p: Plan, mp: ModelPlan, model, pad_id: int) -> tuple[object, dict]:
    marker_len = len(mp.marker_ids)
    train, train_other = _batch(mp.train, pad_id, marker_len, p.device)
    held, held_other = _batch(mp.heldout, pad_id, marker_len, p.device)
    starts = sorted({mp.n_layers - k for k in mp.k_values} | {mp.n_layers - mp.activated_k, 0})
    b_train = lora.boundary_states(model, train.ids, train.mask, starts)
    b_held = lora.boundary_states(model, held.ids, held.mask, starts)
    out = {"zero_shot": {"train": accuracy(model, None, b_train[0], train, train_other, 0),
                         "heldout": accuracy(model, None, b_held[0], held, held_other, 0)},
           "adapters": {}}
    adapters = [(f"tail{k}", k, False) for k in mp.k_values] + [("activated", mp.activated_k, True)]
    for name, k, activated in adapters:  # each training has its own progress bar
        start = mp.n_layers - k
        model = lora.lora_tail(model, k, p.rank, p.alpha, p.targets, adapter_name=name, seed=p.seed,
                               invocation_tokens=mp.marker_ids if activated else None)
        began = time.perf_counter()
        losses = lora.train_adapter(model, name, b_train[start], train, start, p.steps, p.lr, p.batch_size,
                                    p.seed, activated=activated)
        seconds = time.perf_counter() - began
        out["adapters"][name] = {
            "k": k, "activated": activated, "losses": losses, "train_seconds": seconds,
            "trainable_parameters": sum(t.numel() for t in lora.adapter_parameters(model, name)),
            "train": accuracy(model, name, b_train[start], train, train_other, start, activated),
            "heldout": accuracy(model, name, b_held[start], held, held_other, start, activated)}
    return model, out


# --------------------------------------------------------------------------- the switch policies


def _contexts(mp: ModelPlan) -> list[Example]:
    return [e for e in mp.train + mp.heldout if e.kind == "context"]


class _Scores:
    """Per (adapter, policy): each context's gap to the reference and whether it answered right."""

    def __init__(self):
        self.rows: dict[tuple[str, str], list[dict]] = {}

    def add(self, adapter: str, policy: str, logits: torch.Tensor, reference: torch.Tensor,
            examples: list[Example], heldout: set[str]) -> None:
        """`logits` and `reference`: (batch, vocab), one row per example."""
        gap = lora.compare_logits(reference, logits)
        for i, e in enumerate(examples):
            self.rows.setdefault((adapter, policy), []).append({
                "max_abs_logit_diff": gap["max_abs_logit_diff"][i].item(), "kl": gap["kl"][i].item(),
                "top1_agree": bool(gap["top1_agree"][i]), "heldout": e.word in heldout,
                "sense_right": bool(logits[i, e.target] > logits[i, e.other]),
                "label_top1": bool(logits[i].argmax() == e.target)})

    def summary(self) -> dict:
        out: dict = {}
        for (adapter, policy), rows in self.rows.items():
            held = [r for r in rows if r["heldout"]]
            out.setdefault(adapter, {})[policy] = {
                "max_abs_logit_diff": max(r["max_abs_logit_diff"] for r in rows),
                "kl_mean": statistics.fmean(r["kl"] for r in rows), "kl_max": max(r["kl"] for r in rows),
                "top1_agree_pct": 100 * statistics.fmean(r["top1_agree"] for r in rows),
                "sense_pct": 100 * statistics.fmean(r["sense_right"] for r in rows),
                "sense_heldout_pct": 100 * statistics.fmean(r["sense_right"] for r in held) if held else None,
                "label_top1_pct": 100 * statistics.fmean(r["label_top1"] for r in rows), "n": len(rows)}
        return out


def _max_layers(current: list[float] | None, new: list[float]) -> list[float]:
    """Element-wise max of two per-layer lists; NaN (a layer not compared) yields to a number."""
    if current is None:
        return new
    return [b if a != a else a if b != b else max(a, b) for a, b in zip(current, new)]


def by_length(examples: list[Example], m: int) -> list[list[Example]]:
    """Contexts grouped by prefix length, so each group runs as one unpadded batch (a small model
    on a CPU pays per forward, nearly whatever the batch)."""
    groups: dict[int, list[Example]] = {}
    for e in examples:
        groups.setdefault(len(e.ids) - m, []).append(e)
    return [groups[n] for n in sorted(groups)]


@torch.no_grad()
def evaluate_policies(mp: ModelPlan, model, device: str) -> dict:
    """Every context of the study, prefilled by the base model, then switched under each policy:
    answers and logits against the reference, and per layer how far each policy's cache is from it."""
    m = len(mp.marker_ids)
    starts = sorted({mp.n_layers - k for k in mp.k_values})
    heldout = {e.word for e in mp.heldout}
    scores, layers = _Scores(), {}

    def track(key, values):
        layers[key] = _max_layers(layers.get(key), values)

    for group in tqdm(by_length(_contexts(mp), m), desc=f"{mp.name} switch", unit="batch"):
        ids = torch.tensor([e.ids[:-m] for e in group], device=device)  # (batch, prefix)
        marker = torch.tensor([mp.marker_ids] * len(group), device=device)  # (batch, m)
        pre = lora.base_prefill(model, ids, starts)
        base = lora.answer_logits(model, None, lora.copy_cache(pre.cache), marker)
        scores.add("base", "zero_shot", base, base, group, heldout)
        for k in mp.k_values:
            adapter = f"tail{k}"
            caches = {p: lora.switch_cache(model, p, pre, ids, adapter, k) for p in ("recompute", "stale", "tail_patch")}
            logits = {p: lora.answer_logits(model, adapter, lora.copy_cache(c), marker) for p, c in caches.items()}
            for policy, value in logits.items():
                scores.add(adapter, policy, value, logits["recompute"], group, heldout)
            for policy in ("stale", "tail_patch"):
                track((adapter, policy), lora.layer_differences(caches[policy], caches["recompute"], pre.length))
        # the activated adapter: reuse the base cache whole, against one pass over the whole sequence
        reuse = lora.answer_logits(model, "activated", lora.copy_cache(pre.cache), marker)
        one_pass = {}
        for adapter in (None, "activated"):
            cache = lora.new_cache(model)
            logits = lora.answer_logits(model, adapter, cache, torch.cat([ids, marker], -1))
            one_pass[adapter] = (logits, cache)
        scores.add("activated", "activated", reuse, one_pass["activated"][0], group, heldout)
        scores.add("activated", "one_pass", one_pass["activated"][0], one_pass["activated"][0], group, heldout)
        track(("activated", "prefix_vs_base"),
              lora.layer_differences(one_pass[None][1], one_pass["activated"][1], pre.length))
    cache_layers: dict = {}
    for (adapter, what), values in layers.items():
        cache_layers.setdefault(adapter, {})[what] = values
    return {"scores": scores.summary(), "cache_layers": cache_layers, "n_contexts": len(_contexts(mp))}


# --------------------------------------------------------------------------- what a switch costs


def _flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return int(counter.get_total_flops())


def _seconds(fn, repeats: int) -> float:
    from .costs import median_seconds

    fn()  # warm-up
    return median_seconds(fn, repeats)


@torch.no_grad()
def switch_costs(mp: ModelPlan, model, device: str, repeats: int) -> dict:
    """On one long prefix (`bench_tokens` of the default corpus): per k, the FLOPs and median time
    of building the adapter's cache under each policy, and the memory the policy keeps besides the
    cache (the tail patch stores the boundary hidden states: prefix × hidden numbers)."""
    ids = mp.bench_ids.to(device)
    tokens = ids.shape[-1]
    starts = sorted({mp.n_layers - k for k in mp.k_values})
    pre = lora.base_prefill(model, ids, starts)
    hidden = pre.boundary[starts[0]]
    boundary_bytes = hidden.shape[-1] * hidden.element_size() * tokens
    per_k = {}
    for k in tqdm(mp.k_values, desc=f"{mp.name} switch cost", unit="k"):
        adapter, row = f"tail{k}", {}
        for policy in ("recompute", "tail_patch", "stale"):
            def build(policy=policy):
                return lora.switch_cache(model, policy, pre, ids, adapter, k)
            row[policy] = {"flops": _flops(build), "seconds": _seconds(build, repeats),
                           "extra_bytes": boundary_bytes if policy == "tail_patch" else 0}
        row["tail_time_fraction"] = row["tail_patch"]["seconds"] / row["recompute"]["seconds"]
        row["tail_flops_fraction"] = row["tail_patch"]["flops"] / row["recompute"]["flops"]
        row["k_over_L"] = k / mp.n_layers
        per_k[str(k)] = row

    def reuse():
        return lora.switch_cache(model, "activated", pre, ids, "activated", mp.activated_k)
    activated = {"flops": _flops(reuse), "seconds": _seconds(reuse, repeats), "extra_bytes": 0}
    return {"prefix_tokens": tokens, "per_k": per_k, "activated": activated,
            "boundary_bytes_per_token": boundary_bytes // tokens}


# --------------------------------------------------------------------------- where the sense is read


def layer_groups(n_layers: int, groups: int) -> list[tuple[int, ...]]:
    """`groups` contiguous runs of layers, as even as possible."""
    from .patching import runs

    return [tuple(b) for b in runs(range(n_layers), groups)]


def patch_map(mp: ModelPlan, model, device: str, groups: int) -> dict:
    """The patching map of the tail of depth `patch_k`: both contexts of every word, each patched
    from the other (see `kvutils.patching.answer_map`). Rows: each token of the shared prefix (the
    control), the continuation in quarters, the whole continuation; columns: layer groups, all layers."""
    from .patching import answer_map

    m = len(mp.marker_ids)
    by_word: dict[str, list] = {}
    for e in _contexts(mp):
        by_word.setdefault(e.word, [None, None])[e.sense] = e
    pairs = [(e.ids[:-m], by_word[e.word][1 - e.sense].ids[:-m], e.target, e.other)
             for pair in by_word.values() for e in pair]
    cols = layer_groups(mp.n_layers, groups) + [tuple(range(mp.n_layers))]
    out = answer_map(model, f"tail{mp.patch_k}", pairs, mp.marker_ids, len(mp.prefix_tokens), cols,
                     CONTINUATION_BINS, device)
    out["row_labels"] = mp.prefix_tokens + [f"continuation {i}/{CONTINUATION_BINS}"
                                            for i in range(1, CONTINUATION_BINS + 1)] + ["whole continuation"]
    out["col_labels"] = [f"{g[0] + 1}–{g[-1] + 1}" if len(g) > 1 else str(g[0] + 1) for g in cols[:-1]] + ["all"]
    return {"adapter": f"tail{mp.patch_k}", "k": mp.patch_k, **out}


# --------------------------------------------------------------------------- the chapter


def run(p: Plan) -> tuple[dict, list[dict]]:
    """Chapter 5 for every model: train the adapters, switch under every policy, measure the cost,
    patch the cache. Returns (numbers per model, described models)."""
    numbers, described = {}, []
    for mp in p.models:
        began = time.perf_counter()
        loaded = load(mp.name, p.dtype, device=p.device)
        described.append(loaded.describe())
        pad_id = loaded.tokenizer.pad_token_id or 0
        timings = {}
        model, training = _train_all(p, mp, loaded.model, pad_id)
        timings["training_s"] = time.perf_counter() - began
        switch = evaluate_policies(mp, model, p.device)
        timings["switch_s"] = time.perf_counter() - began - sum(timings.values())
        cost = switch_costs(mp, model, p.device, p.timing_repeats)
        timings["cost_s"] = time.perf_counter() - began - sum(timings.values())
        patching = patch_map(mp, model, p.device, p.patch_layer_groups)
        timings["patching_s"] = time.perf_counter() - began - sum(timings.values())
        numbers[mp.name] = {
            "layers": mp.n_layers, "model_type": mp.model_type, "k_values": mp.k_values,
            "activated_k": mp.activated_k, "patch_k": mp.patch_k, "hidden_size": loaded.config.hidden_size,
            "first_changed_layer": {str(k): lora.first_changed_layer(mp.n_layers, k, p.targets, lora.family_of(mp.model_type))
                                    for k in mp.k_values},
            "n_train_examples": len(mp.train), "n_heldout_examples": len(mp.heldout),
            "training": training, "switch": switch, "cost": cost, "patching": patching, "timings": timings}
        del model, loaded
    return numbers, described


def bench(model: str = "smollm2-135m", k_values: str = "1,2,4,L", tokens: int = 256, repeats: int = 3,
          device: str = "cpu") -> dict:
    """For `python -m kvutils.bench`: the tail patch's switch time and FLOPs as a fraction of a
    full recompute, per k, on `tokens` tokens of the default corpus (untrained random adapters: the
    cost does not depend on what the adapter learned)."""
    config = model_config(model, models.resolve(model))
    n_layers = config.num_hidden_layers
    ks = parse_k_values(k_values, n_layers, model)
    loaded = load(model, "float32", device=device)
    ids = data.prompts_from_corpus(loaded.tokenizer, data.load_corpus(), 1, tokens, parameter="tokens")
    peft_model = loaded.model
    for k in ks:
        peft_model = lora.lora_tail(peft_model, k, 8, 16, "q,k,v,o,mlp", random_init=True)
    peft_model = lora.lora_tail(peft_model, ks[0], 8, 16, "q,k,v,o,mlp", adapter_name="activated",
                                invocation_tokens=[0], random_init=True)
    mp = ModelPlan(model, config.model_type, n_layers, ks, ks[0], ks[0], [0], [], [], [], ids)
    cost = switch_costs(mp, peft_model, device, repeats)
    return {str(k): {"k_over_L": row["k_over_L"], "time_fraction": row["tail_time_fraction"],
                     "flops_fraction": row["tail_flops_fraction"],
                     "recompute_ms": 1000 * row["recompute"]["seconds"], "tail_patch_ms": 1000 * row["tail_patch"]["seconds"]}
            for k, row in cost["per_k"].items()}


def check_exactness(numbers: dict, dtype: str) -> None:
    """The chapter's theorems, asserted on the run's numbers: tail patch == recompute within the
    dtype's tolerance; stale reuse exact below the tail and off inside it; the activated adapter's
    prefix K/V identical to the base's; the patch map's control rows copy bit-identical entries (both
    caches share the prefix's), so the answer may move only by the rounding of a batch row."""
    tol, problems = TOLERANCE[dtype], []
    for model, r in numbers.items():
        for k in r["k_values"]:
            adapter = f"tail{k}"
            layers = r["switch"]["cache_layers"][adapter]
            patch_gap = r["switch"]["scores"][adapter]["tail_patch"]["max_abs_logit_diff"]
            if max(layers["tail_patch"]) > tol or patch_gap > tol:
                problems.append(f"{model} k={k}: tail patch off the recompute by {max(layers['tail_patch'])} (K/V), "
                                f"{patch_gap} (logits) > {tol}")
            first = r["first_changed_layer"][str(k)]
            if any(d != 0 for d in layers["stale"][:r["layers"] - k]):
                problems.append(f"{model} k={k}: stale cache differs below the tail: {layers['stale']}")
            if any(not d > 0 for d in layers["stale"][first:]):
                problems.append(f"{model} k={k}: stale cache equals the recompute inside the tail: {layers['stale']}")
        prefix = r["switch"]["cache_layers"]["activated"]["prefix_vs_base"]
        if any(d != 0 for d in prefix if d == d):
            problems.append(f"{model}: the activated adapter changed the prefix's K/V: {prefix}")
        patch = r["patching"]
        # the control copies bit-identical entries; the answer may still move by rounding, because a
        # batched forward need not round every batch row the same way on multi-threaded CPUs
        if patch["prefix_kv_max_diff"] != 0 or patch["control_max_abs_delta"] > tol:
            problems.append(f"{model}: patching the shared prefix moved the answer by "
                            f"{patch['control_max_abs_delta']} (its entries differ by {patch['prefix_kv_max_diff']})")
    if problems:
        raise AssertionError("chapter 5 identities failed:\n  " + "\n  ".join(problems))
