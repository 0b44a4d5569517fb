"""The LoRA tail: a LoRA adapter on the last k of a model's L decoder layers, its activated
variant, running the model from a stored layer boundary, and a small training loop.

Why a tail: a serving system that switches from the base model to an adapter in mid-sequence
holds a cache the base model computed. An adapter that only touches layers L−k … L−1 leaves the
inputs of layers 0 … L−k−1 unchanged, so their cached K/V stay bit-identical by construction and
only the tail needs recomputing — from the hidden states at the boundary (layer L−k), which the
base model's prefill already produced.

One table (`FAMILIES`) maps each architecture (transformers' `model_type`) to its module names;
everything else is family-agnostic. peft does the adapter work: `layers_to_transform` for the
tail, `alora_invocation_tokens` for the activated variant (adapter on only from the marker on).
"""
from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import torch
from tqdm import tqdm

TARGETS = ("q", "k", "v", "o", "mlp")  # the logical names `targets` accepts


# --------------------------------------------------------------------------- one mapping per family


@dataclass(frozen=True)
class Family:
    """Where an architecture keeps its decoder layers, and the module names of each logical target."""

    layers: str  # path of the decoder-layer list inside the *ForCausalLM model
    modules: dict[str, tuple[str, ...]]  # logical target -> module names (suffixes) inside a layer

    def target_modules(self, targets: Sequence[str]) -> list[str]:
        return sorted({name for t in targets for name in self.modules[t]})

    def changes_kv(self, targets: Sequence[str]) -> bool:
        """Whether adapting `targets` changes a layer's own keys or values (GPT-NeoX's fused
        query_key_value projection does so even for "q")."""
        return bool(set(self.target_modules(targets)) & set(self.modules["k"] + self.modules["v"]))


_LLAMA_LIKE = Family("model.layers", {
    "q": ("q_proj",), "k": ("k_proj",), "v": ("v_proj",), "o": ("o_proj",),
    "mlp": ("gate_proj", "up_proj", "down_proj")})
FAMILIES = {
    "llama": _LLAMA_LIKE,  # Llama, SmolLM2
    "qwen3": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "gemma3_text": _LLAMA_LIKE,
    # GPT-NeoX (Pythia) computes q, k and v with one fused projection
    "gpt_neox": Family("gpt_neox.layers", {
        "q": ("query_key_value",), "k": ("query_key_value",), "v": ("query_key_value",),
        "o": ("dense",), "mlp": ("dense_h_to_4h", "dense_4h_to_h")}),
}


def family_of(model_type: str, model_name: str = "", parameter: str = "models") -> Family:
    """The module-name mapping of an architecture, or a ValueError naming it and the known ones."""
    if model_type not in FAMILIES:
        raise ValueError(
            f"{parameter}: {model_name or 'the model'} has architecture {model_type!r}, whose decoder-layer "
            f"and projection names kvutils.lora.adapters does not know; known architectures: "
            f"{', '.join(FAMILIES)}. Add its names to kvutils.lora.adapters.FAMILIES.")
    return FAMILIES[model_type]


def model_type(model: torch.nn.Module) -> str:
    config = unwrap(model).config
    return (getattr(config, "text_config", None) or config).model_type


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a peft model (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def decoder_layers(model: torch.nn.Module) -> torch.nn.ModuleList:
    return unwrap(model).get_submodule(family_of(model_type(model)).layers)


def decoder(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder stack without the language-model head (`model.model`, `gpt_neox`, ...)."""
    return unwrap(model).get_submodule(family_of(model_type(model)).layers.rsplit(".", 1)[0])


def parse_targets(targets: str, parameter: str = "targets") -> list[str]:
    """"q,k,v,o,mlp" -> ["q", "k", "v", "o", "mlp"], each checked."""
    from kvutils.core.checks import check_list

    return check_list(parameter, targets, TARGETS)


def check_k(k: int, n_layers: int, model_name: str = "", parameter: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_layers:
        raise ValueError(f"{parameter}: k={k!r} is not allowed for {model_name or 'this model'}, which has "
                         f"{n_layers} layers; k must be an integer from 1 to {n_layers} (k = {n_layers} "
                         "puts the adapter on every layer)")
    return k


def first_changed_layer(n_layers: int, k: int, targets: Sequence[str], family: Family) -> int:
    """The first layer whose cached K/V an adapter on the last k layers can change: the first tail
    layer if the adapter touches the projections that make its keys or values, else the next one
    (its K/V then only see the changed output of the layer below). Layers below stay bit-identical
    to the base cache."""
    return n_layers - k if family.changes_kv(targets) else n_layers - k + 1


# --------------------------------------------------------------------------- adapters


def lora_tail(model: torch.nn.Module, k: int, r: int, alpha: float, targets: str | Sequence[str] = "q,k,v,o,mlp",
              *, adapter_name: str | None = None, invocation_tokens: Sequence[int] | None = None,
              random_init: bool = False, seed: int = 0):
    """Add a LoRA adapter of rank `r` on the last `k` decoder layers and make it the active one.

    `model` is a transformers causal LM (wrapped into a peft model) or a peft model from an earlier
    call (the adapter is added beside the others). `invocation_tokens` makes it an *activated* LoRA:
    peft applies it only from the last occurrence of those tokens on, so everything before them is
    computed by the base weights. peft initialises B = 0 (the adapter starts as the identity);
    `random_init=True` makes B random too, as tests need a non-trivial adapter. Returns the peft model.
    """
    from peft import LoraConfig, get_peft_model

    inner = unwrap(model)
    n_layers = (getattr(inner.config, "text_config", None) or inner.config).num_hidden_layers
    check_k(k, n_layers)
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"rank: r={r!r} is not allowed; the rank must be an integer >= 1")
    targets = parse_targets(targets) if isinstance(targets, str) else list(targets)
    family = family_of(model_type(model))
    config = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, task_type="CAUSAL_LM",
                        target_modules=family.target_modules(targets),
                        layers_to_transform=list(range(n_layers - k, n_layers)),
                        layers_pattern=family.layers.rsplit(".", 1)[-1],
                        init_lora_weights=not random_init,
                        alora_invocation_tokens=list(invocation_tokens) if invocation_tokens else None)
    name = adapter_name or f"tail{k}"
    with torch.random.fork_rng(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # peft calls a deprecated transformers helper
        torch.manual_seed(seed)
        if hasattr(model, "peft_config"):
            model.add_adapter(name, config)
            peft_model = model
        else:
            peft_model = get_peft_model(model, config, adapter_name=name)
    peft_model.set_adapter(name)
    peft_model.eval()
    return peft_model


def adapter_parameters(peft_model, adapter_name: str) -> list[torch.nn.Parameter]:
    """The LoRA weights of one adapter; only these train."""
    return [p for n, p in peft_model.named_parameters() if "lora_" in n and f".{adapter_name}." in n]


@contextmanager
def active_adapter(model, adapter_name: str | None) -> Iterator:
    """Make one adapter active (None: the base model, adapters disabled); restore the previous
    state on exit, even after an error. A model without adapters is the base model already."""
    if not hasattr(model, "peft_config"):
        if adapter_name is not None:
            raise ValueError(f"adapter {adapter_name!r} asked for, but the model has no adapters")
        yield model
        return
    previous = model.active_adapter
    try:
        if adapter_name is None:
            with model.disable_adapter():
                yield model
        else:
            model.set_adapter(adapter_name)
            yield model
    finally:
        model.set_adapter(previous)


def invocation_tokens(tokenizer, marker: str) -> list[int]:
    return tokenizer(marker, add_special_tokens=False).input_ids


def check_marker(tokenizer, texts: Sequence[str], marker: str, model_name: str = "",
                 parameter: str = "marker") -> list[int]:
    """The marker's tokens must be the same alone and appended to every text; return them.

    An activated LoRA finds its invocation by searching the input for the marker's token ids, and
    the tail switch appends the marker's tokens to a cached prefix. If the marker merges with the
    text before it (".." after "storm." becomes "..."), the ids are not found, the adapter never
    switches on, and the cached prefix is not the prefix of the full text.
    """
    if not isinstance(marker, str) or not marker:
        raise ValueError(f"{parameter} must be a non-empty string, e.g. '\\nSense:'")
    ids = invocation_tokens(tokenizer, marker)
    for text in texts:
        alone = tokenizer(text, add_special_tokens=True).input_ids
        joined = tokenizer(text + marker, add_special_tokens=True).input_ids
        if joined != alone + ids:
            tail = tokenizer.convert_ids_to_tokens(joined[len(alone) - 1:])
            raise ValueError(
                f"{parameter}: {marker!r} tokenises differently after the text than alone for "
                f"{model_name or 'this tokenizer'}: alone {tokenizer.convert_ids_to_tokens(ids)}, after "
                f"{text[-20:]!r} {tail}. The activated adapter would never find its invocation tokens and "
                "the cached prefix would not be a prefix of the switched sequence; start the marker with a "
                "character that does not merge with the text before it, e.g. a newline ('\\nSense:').")
    return ids


# --------------------------------------------------------------------------- running from a boundary


@contextmanager
def skip_lower_layers(model: torch.nn.Module, n: int) -> Iterator:
    """Inside the block, decoder layers 0 … n−1 pass their input through unchanged (and touch no
    cache), so a forward given `inputs_embeds` = the hidden states at layer n runs only layers n … L−1.
    Rotary embeddings and masks are still built by the model from the positions, as in a full pass."""
    layers = decoder_layers(model)
    skipped = []
    try:
        for layer in layers[:n]:
            layer.forward = _identity
            skipped.append(layer)
        yield model
    finally:
        for layer in skipped:
            del layer.forward  # back to the class's forward


def _identity(hidden_states, *args, **kwargs):
    return hidden_states


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """Position ids for a left-padded batch: 0 at each row's first real token. (batch, seq)"""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def boundary_states(model, ids: torch.Tensor, mask: torch.Tensor, layers: Sequence[int],
                    cache=None) -> dict[int, torch.Tensor]:
    """The base model's hidden states entering each of `layers` (0 = the embeddings), for a
    left-padded batch: {layer: (batch, seq, hidden)}. Adapters are off; no gradients. A `cache`
    given (see `new_cache`) is filled with every layer's K/V in the same pass."""
    with torch.no_grad(), active_adapter(model, None):
        out = decoder(model)(input_ids=ids, attention_mask=mask, position_ids=positions_of(mask),
                             output_hidden_states=True, cache=cache, use_cache=cache is not None)
    return {layer: out.hidden_states[layer] for layer in layers}


def states_and_prefix_cache(model, ids: torch.Tensor, mask: torch.Tensor, layers: Sequence[int],
                            marker_len: int) -> tuple[dict[int, torch.Tensor], object]:
    """One base pass over a left-padded batch whose rows all end with the marker: the hidden states
    entering `layers` (see `boundary_states`) and the cache of everything before the marker."""
    cache = new_cache(model)
    states = boundary_states(model, ids, mask, layers, cache=cache)
    cache.crop(-marker_len)
    return states, cache


def select_rows(cache, rows: Sequence[int] | torch.Tensor):
    """A cache of some rows of `cache`'s batch; `cache` itself is left as it is."""
    out = copy_cache(cache)
    index = torch.as_tensor(rows, dtype=torch.long)
    for layer in out.layers:
        if layer.is_initialized:
            layer.batch_select_indices(index.to(layer.keys.device))
    return out


def marker_logits(model, boundary: torch.Tensor, mask: torch.Tensor, start: int, marker_len: int,
                  prefix_cache) -> torch.Tensor:
    """An activated adapter's last-position logits (batch, vocab), running only the marker's tokens
    through layers start … L−1 on `prefix_cache` (the base model's K/V of everything before the
    marker; it grows by the marker). The same numbers as `tail_logits` over the whole sequence with
    `alora_offsets`: the activated adapter leaves the prefix to the base weights, so the prefix's
    K/V in the tail are the base model's, and causal attention lets no gradient reach them. The
    prefix's tokens drop out of every training step (a few tokens of marker instead of the whole
    sequence)."""
    positions = positions_of(mask)[:, -marker_len:]
    with skip_lower_layers(model, start), efficient_head(model):
        out = model(inputs_embeds=boundary[:, -marker_len:], attention_mask=mask, position_ids=positions,
                    cache=prefix_cache, use_cache=True, logits_to_keep=1,
                    alora_offsets=[marker_len] * boundary.shape[0])
    return out.logits[:, -1]


@contextmanager
def efficient_head(model: torch.nn.Module) -> Iterator:
    """Inside the block the output head gets a contiguous input, and under autocast it multiplies
    by a low-precision copy of its weight made once (and kept on the head) rather than at every call.

    With `logits_to_keep=1` a batch's last hidden states are a strided view, and a linear layer on
    a strided 3-D input runs as a batched matmul against the weight expanded per row: on CPU that
    took more than half of a training step of a one-layer tail (and far more with Gemma 3's
    262k-token head). Autocast casts a frozen weight anew at every call: for Gemma 3's head, 168M
    numbers per step to multiply 16 rows."""
    head = unwrap(model).get_output_embeddings()
    plain = head.forward

    def forward(hidden, *args, **kwargs):
        kind = hidden.device.type
        if head.bias is not None or not torch.is_autocast_enabled(kind):
            return plain(hidden.contiguous(), *args, **kwargs)
        dtype = torch.get_autocast_dtype(kind)
        key = (dtype, head.weight.data_ptr(), head.weight._version)
        if getattr(head, "_kvutils_cast", (None,))[0] != key:
            head._kvutils_cast = (key, head.weight.detach().to(dtype))
        return torch.nn.functional.linear(hidden.contiguous().to(dtype), head._kvutils_cast[1])
    head.forward = forward
    try:
        yield model
    finally:
        del head.forward  # back to the class's forward


def tail_logits(model, boundary: torch.Tensor, mask: torch.Tensor, start: int,
                alora_offsets: list[int] | None = None) -> torch.Tensor:
    """Last-position logits (batch, vocab) of a left-padded batch, computed from the hidden states
    at layer `start`: only layers start … L−1 run (forward and backward)."""
    extra = {"alora_offsets": alora_offsets} if alora_offsets is not None else {}
    with skip_lower_layers(model, start), efficient_head(model):
        out = model(inputs_embeds=boundary, attention_mask=mask, position_ids=positions_of(mask),
                    use_cache=False, logits_to_keep=1, **extra)
    return out.logits[:, -1]


# --------------------------------------------------------------------------- training

TRAIN_DTYPES = ("auto", "float32", "bfloat16")


def resolve_train_dtype(train_dtype: str, device: str) -> str:
    """"auto": bfloat16 where the device multiplies bfloat16 natively (a CPU with AVX512-BF16 or AMX
    — there bfloat16 autocast trains a tail about twice as fast — or a CUDA GPU that supports it),
    float32 elsewhere (emulated bfloat16 would be slower than float32)."""
    if train_dtype not in TRAIN_DTYPES:
        raise ValueError(f"train_dtype: {train_dtype!r} is not allowed; choose one of {', '.join(TRAIN_DTYPES)}")
    if train_dtype != "auto":
        return train_dtype
    kind = torch.device(device).type
    if kind == "cpu":
        native = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    else:
        native = kind == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return "bfloat16" if native else "float32"


def training_precision(train_dtype: str, device: str | torch.device):
    """The context a training forward runs in: autocast to bfloat16 (the matrix products in
    bfloat16; the LoRA weights, their gradients and AdamW stay float32), or nothing for float32.
    Open it around a forward, never around optimizer steps (autocast keeps its casts of trainable
    weights until it closes). Evaluation runs outside it, in the model's own dtype."""
    if train_dtype == "float32":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=getattr(torch, train_dtype))



@dataclass
class Batch:
    """A left-padded batch: every row ends with the marker, the answer is read at the last position."""

    ids: torch.Tensor  # (batch, seq)
    mask: torch.Tensor  # (batch, seq) 1 on real tokens
    targets: torch.Tensor  # (batch,) the answer token
    marker_len: int  # tokens of the marker (the activated adapter's offset from the end)


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = torch.tensor(r)
        mask[i, width - len(r):] = 1
    return ids, mask


def train_adapter(model, adapter_name: str, boundary: torch.Tensor, batch: Batch, start: int, steps: int,
                  lr: float, batch_size: int, seed: int, activated: bool = False,
                  on_step: Callable[[int, float], None] | None = None, prefix_cache=None,
                  train_dtype: str = "float32") -> list[float]:
    """Train one adapter with AdamW on next-token cross-entropy at the last position; return the
    loss of every step.

    `boundary` (examples, seq, hidden) holds the frozen base layers' output at layer `start` for the
    whole training set, computed once: each step runs forward and backward through layers
    start … L−1 only. Only the adapter's LoRA weights have gradients. Seeded: the same arguments
    give the same losses. An activated adapter given `prefix_cache` (the base model's K/V of every
    example before its marker, see `marker_logits`) runs only the marker's tokens. `train_dtype`
    "bfloat16" runs each step's forward under autocast (see `training_precision`).
    """
    if prefix_cache is not None and not activated:
        raise ValueError("prefix_cache is for an activated adapter only: a LoRA tail changes the prefix's K/V")
    model.set_adapter(adapter_name)
    params = adapter_parameters(model, adapter_name)
    if not params:
        raise ValueError(f"adapter {adapter_name!r} has no LoRA weights")
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    try:
        return _train_steps(model, adapter_name, boundary, batch, start, steps, optimizer, batch_size, seed,
                            activated, on_step, prefix_cache, train_dtype)
    finally:
        for p in params:
            p.requires_grad_(False)


def _train_steps(model, adapter_name: str, boundary: torch.Tensor, batch: Batch, start: int, steps: int, optimizer,
                 batch_size: int, seed: int, activated: bool, on_step, prefix_cache, train_dtype: str) -> list[float]:
    order = random.Random(seed)
    n = boundary.shape[0]
    queue: list[int] = []
    losses = []
    for step in tqdm(range(steps), desc=f"train {adapter_name}", unit="step"):
        if len(queue) < batch_size:  # epochs of a seeded permutation
            perm = list(range(n))
            order.shuffle(perm)
            queue += perm
        rows, queue = queue[:batch_size], queue[batch_size:]
        mask = batch.mask[rows]
        # autocast around the forward only: it caches the low-precision copy of each trainable
        # weight for as long as it is open, so around the loop the optimizer's steps would go unseen
        with training_precision(train_dtype, boundary.device):
            if prefix_cache is not None:
                logits = marker_logits(model, boundary[rows], mask, start, batch.marker_len,
                                       select_rows(prefix_cache, rows))
            else:
                offsets = [batch.marker_len] * len(rows) if activated else None
                logits = tail_logits(model, boundary[rows], mask, start, offsets)
        loss = torch.nn.functional.cross_entropy(logits.float(), batch.targets[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"training {adapter_name}: loss became {losses[-1]} at step {step}")
    return losses


# --------------------------------------------------------------------------- switch policies


POLICIES = ("recompute", "stale", "tail_patch", "activated")
POLICY_TEXT = {
    "recompute": "full recompute of the prefix under the adapter (the reference)",
    "stale": "stale reuse: the base cache in every layer",
    "tail_patch": "tail patch: layers below L−k kept, the tail's K/V recomputed from the stored boundary",
    "activated": "activated adapter (aLoRA): the base cache reused whole",
}


@dataclass
class Prefilled:
    """What the base model's prefill of the prefix leaves behind."""

    cache: object  # transformers Cache, every layer's K/V of the prefix
    boundary: dict[int, torch.Tensor]  # layer -> hidden states entering it, (1, prefix, hidden)
    length: int


def copy_cache(cache):
    """A cache sharing the same K/V tensors whose layers can grow independently (appending
    rebinds a layer's tensors, so the original never sees the new tokens)."""
    import copy

    out = copy.copy(cache)
    out.layers = [copy.copy(layer) for layer in cache.layers]
    return out


def new_cache(model):
    from transformers import DynamicCache

    return DynamicCache(config=unwrap(model).config)


def base_prefill(model, ids: torch.Tensor, boundary_layers: Sequence[int]) -> Prefilled:
    """Prefill `ids` (1, prefix) with the base model (adapters off), keeping the hidden states that
    enter each of `boundary_layers` — what a server would store to switch to a tail of that depth."""
    cache = new_cache(model)
    with torch.no_grad(), active_adapter(model, None):
        out = decoder(model)(input_ids=ids, cache=cache, use_cache=True, output_hidden_states=True)
    boundary = {layer: out.hidden_states[layer] for layer in boundary_layers}
    return Prefilled(cache, boundary, ids.shape[-1])


@torch.no_grad()
def switch_cache(model, policy: str, prefilled: Prefilled, ids: torch.Tensor, adapter: str, k: int):
    """The cache the adapter continues from, under one policy. `ids` (1, prefix) are the prefix's
    tokens (only `recompute` reads them)."""
    n_layers = len(decoder_layers(model))
    if policy in ("stale", "activated"):
        return copy_cache(prefilled.cache)
    cache = new_cache(model)
    with active_adapter(model, adapter):
        if policy == "recompute":
            decoder(model)(input_ids=ids, cache=cache, use_cache=True)
            return cache
        if policy == "tail_patch":
            start = n_layers - k
            positions = torch.arange(prefilled.length, device=ids.device)[None]
            with skip_lower_layers(model, start):
                decoder(model)(inputs_embeds=prefilled.boundary[start], position_ids=positions,
                               cache=cache, use_cache=True)
            kept = copy_cache(prefilled.cache).layers
            cache.layers[:start] = kept[:start]  # bit-identical by construction: the same tensors
            return cache
    raise ValueError(f"policy: {policy!r} unknown; choose one of {', '.join(POLICIES)}")


@torch.no_grad()
def answer_logits(model, adapter: str | None, cache, marker_ids: torch.Tensor) -> torch.Tensor:
    """Run the marker's tokens (batch, m) on `cache` (which grows by m) under `adapter`; return the
    logits at the marker's last token, (batch, vocab). An activated adapter finds its invocation in
    these tokens and switches on from there."""
    with active_adapter(model, adapter), efficient_head(model):
        out = model(input_ids=marker_ids, cache=cache, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1]


def compare_logits(reference: torch.Tensor, other: torch.Tensor) -> dict:
    """Max |logit difference|, KL(reference ‖ other) in nats and top-1 agreement, per row, in float64."""
    ref, oth = reference.double(), other.double()
    log_p, log_q = ref.log_softmax(-1), oth.log_softmax(-1)
    return {"max_abs_logit_diff": (ref - oth).abs().amax(-1),
            "kl": (log_p.exp() * (log_p - log_q)).sum(-1).clamp(min=0),
            "top1_agree": ref.argmax(-1) == oth.argmax(-1)}


def layer_differences(cache_a, cache_b, length: int) -> list[float | None]:
    """Per layer, max |difference| of the keys and values of positions < `length` that both caches
    still hold (a sliding-window layer keeps only its most recent entries); None for a layer where
    no such position is left. None, not NaN: a NaN here is a real NaN in a cache, and every check
    must fail on it."""
    from kvutils.models.greedy import cache_layers

    out = []
    for a, b in zip(cache_layers(cache_a, cache_a.get_seq_length()), cache_layers(cache_b, cache_b.get_seq_length())):
        start = max(a.first_position, b.first_position)
        held_a, held_b = a.positions(start, length), b.positions(start, length)
        if start >= length or held_a is None or held_b is None:
            out.append(None)
            continue
        out.append(nan_max((x - y).abs().max().item() for x, y in zip(held_a, held_b)))
    return out


def nan_max(values) -> float | None:
    """The largest of `values`, NaN if any is NaN (Python's max() keeps or drops a NaN depending
    on where it stands), None-s skipped, None if nothing is left."""
    numbers = [float(v) for v in values if v is not None]
    if any(math.isnan(v) for v in numbers):
        return math.nan
    return max(numbers, default=None)
