"""Chapter 5: switch to a LoRA tail mid-sequence — train it, switch under four cache policies,
and patch the cache to see where the adapter reads its answer.

The task after the marker is one of `kvutils.studies.qwen3_switch.tasks` (`continuation`: does passage B
continue
passage A?, or `senses`: name the sense of an ambiguous word). For every k of the sweep a LoRA tail
and an activated LoRA of that depth are trained from cached boundary states, and scored on held-out
examples under each switch policy.

This file is the plan: `plan()` checks every parameter and tokenises everything before any model
loads (L and the architecture come from the model's config). `run.run(plan)` returns (numbers,
described): `train` trains the adapters, `policies` measures the switch, and
`exactness.check_exactness` asserts the chapter's identities on the numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from kvutils.core import checks, data
from kvutils.lora.families import family_of
from kvutils.lora.tails import check_k, check_marker, invocation_tokens, parse_targets
from kvutils.lora.training import resolve_train_dtype
from kvutils.models.checks import check_models
from kvutils.models.configs import model_config
from kvutils.models.loading import load_tokenizer
from kvutils.studies.parameters.chapter5 import Chapter5Parameters
from kvutils.studies.parameters.values import split_per_model
from kvutils.studies.qwen3_switch import tasks as switch_tasks
from kvutils.studies.qwen3_switch.tasks import CONTINUATION_BINS, CONTROL_BINS, Example

TOLERANCE = {"float32": 1e-4, "float64": 1e-9}  # tail patch vs recompute: logits and K/V


@dataclass
class ModelPlan:
    name: str
    model_type: str
    n_layers: int
    k_values: list[int]
    patch_k: int
    marker_ids: list[int]
    train: list[Example]
    heldout: list[Example]
    patch_pairs: list[tuple[Example, Example]]  # two examples sharing their first `prefix_len` tokens
    prefix_len: int
    prefix_labels: list[str]  # one per control row of the patch map
    bench_ids: torch.Tensor  # (1, bench_tokens): the long prefix of the cost benchmark
    lr: float | None = None  # AdamW learning rate of this model's adapters (None: nothing trains)
    steps: int = 0  # AdamW steps per adapter of this model


@dataclass
class Plan:
    models: list[ModelPlan]
    task: str
    rank: int
    alpha: float
    targets: list[str]
    batch_size: int
    seed: int
    dtype: str
    device: str
    timing_repeats: int
    patch_layer_groups: int
    exact_examples: int
    train_dtype: str  # resolved: "float32" or "bfloat16"
    schedule: str = "constant"  # the learning rate over the steps (kvutils.lora.training.SCHEDULES)
    warmup: int = 0  # steps of linear warm-up (schedule "cosine")
    loss: str = "vocab"  # kvutils.lora.training.LOSSES
    max_grad_norm: float = 0.0  # each step's gradient clipped to this norm (0: not clipped)


# --------------------------------------------------------------------------- checking the parameters


# fp32 words per adapter weight while training: the weight, its gradient, AdamW's two moments
ADAPTER_COPIES = 4


def adapter_bytes(config, k: int, rank: int, targets: list[str]) -> int:
    """Bytes the LoRA tail of depth `k` needs while training, from the config alone: each adapted
    projection (in -> out) gets rank x (in + out) weights (A and B), ADAPTER_COPIES fp32 words each;
    `mlp` counts three projections (gate, up, down)."""
    from kvutils.models.layers import kv_shape

    kv_heads, head_dim = kv_shape(config)
    width, heads = config.hidden_size, config.num_attention_heads
    inner = getattr(config, "intermediate_size", None) or 4 * width
    sides = {"q": width + heads * head_dim, "k": width + kv_heads * head_dim,
             "v": width + kv_heads * head_dim,
             "o": heads * head_dim + width, "mlp": 3 * (width + inner)}
    return rank * sum(sides[t] for t in targets) * k * 4 * ADAPTER_COPIES


def check_rank_fits(config, ks: list[int], rank: int, targets: list[str], name: str) -> None:
    """The deepest tail's adapters must fit in this machine's memory: rank too large for it is an
    error naming `rank`, before the model loads (not an allocation failure after it)."""
    import psutil

    need, memory = adapter_bytes(config, max(ks), rank, targets), psutil.virtual_memory().total
    if need > memory:
        fits = max(1, rank * memory // need)
        raise ValueError(f"rank: {rank:,} would need {need / 2**30:,.1f} GiB for the k={max(ks)} tail of "
                         f"{name} while training (weights, gradients and AdamW's two moments of rank x (in + "
                         f"out) per adapted projection), more than this machine's {memory / 2**30:,.1f} GiB "
                         f"of memory; give at most rank {fits:,}")


def parse_per_model(parameter: str, value, model_names: list[str]) -> dict[str, float | int]:
    """`lr` or `steps`: one value for every model, or a default and `model:value` pairs, each value
    checked without the models by the declaration (`split_per_model`). Models differ in the rate at
    which a LoRA tail learns without diverging, and in how many steps it needs. A pair naming a known
    model not in this run is allowed (the defaults name both embedded models, and a reader may run
    one), a name no model has is a misspelling; every model of the run must get a value."""
    default, values = split_per_model(parameter, value)
    from kvutils.models.registry import known_names

    strangers = [n for n in values if n not in model_names and n not in known_names() and "/" not in n]
    if strangers:
        raise ValueError(f"{parameter}: {', '.join(map(repr, strangers))} is neither a model of this run "
                         f"({', '.join(model_names)}) nor a known model; check the spelling")
    missing = [m for m in model_names if m not in values and default is None]
    if missing:
        raise ValueError(f"{parameter}: no value for {', '.join(missing)}; add a default or "
                         f"{missing[0]}:value")
    return {m: values.get(m, default) for m in model_names}


def parse_k(value, n_layers: int, name: str, parameter: str) -> int:
    """An int, or "L" (every layer)."""
    if value == "L":
        return n_layers
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    return check_k(value, n_layers, name, parameter)


def parse_k_values(text: str, n_layers: int, name: str) -> list[int]:
    items = checks.split_items("k_values", text, example="1,2,4,L")  # papermill passes `-p k_values 4` as 4
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


def check_contexts(examples: list[Example], tokenizer, prefix_len: int, m: int, name: str) -> None:
    """Both contexts of a word must start with the same prefix tokens ("The <word>") — the patch
    map's control rows rely on it — and share at least CONTINUATION_BINS continuation tokens."""
    problems = []
    contexts: dict[str, list[Example]] = {}
    for e in examples:
        if e.kind == "context":
            contexts.setdefault(e.group, []).append(e)
    for word, (a, b) in contexts.items():
        if a.ids[:prefix_len] != b.ids[:prefix_len] or len(tokenizer("The " + word).input_ids) != prefix_len:
            problems.append(f"{word!r}: 'The {word}' is not the same {prefix_len} tokens at the start of "
                            "both contexts")
        if min(len(a.ids), len(b.ids)) - m - prefix_len < CONTINUATION_BINS:
            problems.append(f"{word!r}: a continuation is shorter than {CONTINUATION_BINS} tokens")
    if problems:
        raise ValueError(f"senses_file: contexts unusable with {name}:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class TaskData:
    """What `plan` reads for the task, once for all models."""

    task: str
    marker: str
    words: tuple = ()  # senses: (train words, held-out words)
    train_docs: tuple = ()  # continuation
    eval_docs: tuple = ()
    eval_source: str = ""


def check_task(p: Chapter5Parameters) -> TaskData:
    """Read the task's data once for all models, checking the parameters only that task uses."""
    marker = p.marker or switch_tasks.MARKERS[p.task]
    if p.task == "senses":
        words = data.load_senses(p.senses_file)
        return TaskData(p.task, marker, words=split_words(words, p.train_words, p.heldout_words))
    checks.check_count("passage_tokens", p.passage_tokens, 4)
    checks.check_count("candidate_tokens", p.candidate_tokens, CONTINUATION_BINS)
    for name, value in (("n_train", p.n_train), ("n_heldout", p.n_heldout)):
        checks.check_int(name, value, 2, checks.MAX_ITEMS, checks.ITEMS_WHY)
        if value % 2:
            raise ValueError(f"{name} must be even (each passage A is shown with its true continuation and "
                             f"with another document's passage), got {value}")
    if not isinstance(p.eval_corpus, str):
        raise ValueError("eval_corpus must be a string: '' (the held-out quarter of corpus), a folder of "
                         f".txt files or a .jsonl file; got {p.eval_corpus!r}")
    docs = data.load_corpus(p.corpus, parameter="corpus")
    if p.eval_corpus:
        train_docs, eval_docs = docs, data.load_corpus(p.eval_corpus, parameter="eval_corpus")
        source = p.eval_corpus
        shared = {d.text for d in train_docs} & {d.text for d in eval_docs}
        if shared:
            raise ValueError(f"eval_corpus: {len(shared)} of its documents are also in corpus {p.corpus!r}; "
                             "held-out documents must never be trained on")
    else:
        train_docs, eval_docs = switch_tasks.split_documents(docs)
        source = f"every 4th document of {p.corpus}"
    return TaskData(p.task, marker, train_docs=tuple(train_docs), eval_docs=tuple(eval_docs),
                    eval_source=source)


def plan(p: Chapter5Parameters) -> Plan:
    """Prepare chapter 5 from its checked parameters: check what depends on the models and the task,
    tokenise every example; loads tokenizers and config files only. Raises ValueError /
    ModelNotAvailable naming the parameter and what is allowed."""
    resolved_train_dtype = resolve_train_dtype(p.train_dtype, p.device)
    target_list = parse_targets(p.targets)
    resolved_models = check_models("models", p.models, family="causal")
    learning_rates = parse_per_model("lr", p.lr, [r.name for r in resolved_models])
    step_counts = parse_per_model("steps", p.steps, [r.name for r in resolved_models])
    td = check_task(p)
    bench_docs = data.load_corpus()
    plans = []
    for r in resolved_models:
        config = model_config(r.name, r)
        family_of(config.model_type, r.name)  # an unknown architecture fails here
        n_layers = config.num_hidden_layers
        ks = parse_k_values(p.k_values, n_layers, r.name)
        check_rank_fits(config, ks, p.rank, target_list, r.name)
        p_k = parse_k(p.patch_k, n_layers, r.name, "patch_k")
        if p_k not in ks:
            raise ValueError(f"patch_k: {p.patch_k!r} (k={p_k}) is not one of the trained k_values {ks} of "
                             f"{r.name}")
        if p.patch_layer_groups > n_layers:
            raise ValueError(f"patch_layer_groups must be between 1 and {n_layers} (the layers of {r.name}), "
                             f"got {p.patch_layer_groups}")
        tokenizer = load_tokenizer(r.name)
        task_plan = (_senses_plan if td.task == "senses" else _continuation_plan)(
            td, tokenizer, r.name, seed=p.seed, passage_tokens=p.passage_tokens,
            candidate_tokens=p.candidate_tokens,
            n_train=p.n_train, n_heldout=p.n_heldout)
        marker_ids, train, heldout, pairs, prefix_len, labels = task_plan
        if p.exact_examples > len(heldout):
            raise ValueError(f"exact_examples: {p.exact_examples} is more than the {len(heldout)} held-out "
                             f"examples of {r.name}; give at most {len(heldout)}")
        longest = max(len(e.ids) for e in train + heldout)
        if longest > r.context:
            raise ValueError(f"passage_tokens, candidate_tokens: an example of {r.name} has {longest} tokens "
                             f"(with the marker and the question), more than its context of {r.context}; "
                             "lower them")
        if p.bench_tokens > r.context:
            raise ValueError(f"bench_tokens: {p.bench_tokens} is more than {r.name}'s context of {r.context} "
                             "tokens")
        bench = data.prompts_from_corpus(tokenizer, bench_docs, 1, p.bench_tokens, parameter="bench_tokens")
        plans.append(ModelPlan(r.name, config.model_type, n_layers, ks, p_k, marker_ids, train, heldout,
                               pairs[:p.patch_pairs], prefix_len, labels, bench, learning_rates[r.name],
                               step_counts[r.name]))
    return Plan(plans, td.task, p.rank, float(p.alpha), target_list, p.batch_size, p.seed, p.dtype, p.device,
                p.timing_repeats, p.patch_layer_groups, p.exact_examples, resolved_train_dtype, p.schedule,
                p.warmup, p.loss, float(p.max_grad_norm))


def _senses_plan(td: TaskData, tokenizer, name: str, **_):
    train, heldout = td.words
    data.check_words_for_tokenizer(train + heldout, tokenizer, name)
    texts = [w.prefix + s.continuation for w in train + heldout for s in w.senses]
    texts += [ref for w in train + heldout for s in w.senses for ref in s.references]
    marker_ids = check_marker(tokenizer, texts, td.marker, name)
    prefix = tokenizer(train[0].prefix).input_ids
    tokens = [t.replace("Ġ", " ").replace("▁", " ") for t in tokenizer.convert_ids_to_tokens(prefix)]
    examples = {split: switch_tasks.senses_examples(tokenizer, ws, marker_ids, name)
                for split, ws in (("train", train), ("heldout", heldout))}
    check_contexts(examples["train"] + examples["heldout"], tokenizer, len(prefix), len(marker_ids), name)
    contexts: dict[str, list] = {}
    for e in examples["train"] + examples["heldout"]:
        if e.kind == "context":
            contexts.setdefault(e.group, [None, None])[e.label] = e
    pairs = [(a, b) for a, b in contexts.values()]
    pairs += [(b, a) for a, b in contexts.values()]
    return marker_ids, examples["train"], examples["heldout"], pairs, len(prefix), tokens[:-1] + ["⟨word⟩"]


def _continuation_plan(td: TaskData, tokenizer, name: str, *, seed: int, passage_tokens: int,
                       candidate_tokens: int, n_train: int, n_heldout: int):
    marker_ids = invocation_tokens(tokenizer, td.marker)
    if not marker_ids:
        raise ValueError("marker must give at least one token")
    train = switch_tasks.continuation_examples(tokenizer, list(td.train_docs), n_train, passage_tokens,
                                               candidate_tokens, marker_ids, seed, name, "corpus")
    eval_parameter = ("eval_corpus" if td.eval_source and "every 4th" not in td.eval_source
                      else "corpus (its held-out quarter)")
    heldout = switch_tasks.continuation_examples(tokenizer, list(td.eval_docs), n_heldout, passage_tokens,
                                                 candidate_tokens, marker_ids, seed + 1, name, eval_parameter)
    prefix_len = len(tokenizer("", add_special_tokens=True).input_ids) + passage_tokens
    pairs = [(heldout[i], heldout[i + 1]) for i in range(0, len(heldout), 2)]  # the same A, true / foreign B
    bins = min(prefix_len, CONTROL_BINS)
    return marker_ids, train, heldout, pairs, prefix_len, [f"passage A {i}/{bins}" for i in range(1,
                                                                                                  bins + 1)]
