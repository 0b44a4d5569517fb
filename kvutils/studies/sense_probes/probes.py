"""Where a word's meaning lives: per-layer states of an ambiguous word in its two contexts, a
nearest-centroid sense probe, and how much attention a later copy of the word pays to its context.

Vocabulary, for one word w of `senses.json` and one of its senses s:
- *context*: "The <w>" + the continuation of s. The word's position there is the **old** position:
  the one a causal model's cache holds, computed before the continuation was read.
- *repeat*: `repeat_template` rendered with the prefix, the continuation and the word, e.g.
  "The bank of the river was muddy. The bank": the last copy of w is the **new** position.
- *references*: unambiguous sentences for s; the word's states there give the sense centroids.

Everything for one model comes from one batched, right-padded forward pass per batch of
sentences; padding never reaches a real token (causal mask, or the attention mask for encoders).
"""
from __future__ import annotations

import string
from dataclasses import dataclass

import torch
from tqdm import tqdm

from kvutils.core.data import Word
from kvutils.core.hooks import bert_key_modules, capture_outputs
from kvutils.models.loading import Loaded
from kvutils.studies.sense_probes.templates import (  # noqa: F401 (probes.DISTANCES, ... as before)
    CONTEXT_TEMPLATE,
    DEFAULT_REPEAT_TEMPLATE,
    DISTANCES,
    REPEAT_FIELDS,
    check_repeat_template,
)

# --------------------------------------------------------------------------- building the inputs


def _render(template: str, values: dict[str, str]) -> tuple[str, dict[str, tuple[int, int]]]:
    """Format `template` and return the text with each field's character span."""
    text, spans = "", {}
    for literal, field, _, _ in string.Formatter().parse(template):
        text += literal
        if field is not None:
            spans[field] = (len(text), len(text) + len(values[field]))
            text += values[field]
    return text, spans


def word_token_id(tokenizer, word: str) -> int:
    """The word's single token as it appears after a space (checked by data.check_words_for_tokenizer)."""
    return tokenizer(" " + word, add_special_tokens=False).input_ids[0]


@dataclass
class Encoded:
    """One sentence as token ids, with the token index of the word and of the spans we read."""

    ids: list[int]
    word: int  # token index of the word read by the probe (the old or the new copy)
    old_word: int  # token index of the word inside the prefix (== word for contexts)
    prefix: tuple[int, int]  # token span [start, stop) of the prefix, special tokens included
    continuation: tuple[int, int]  # token span of the continuation ((0, 0) for references)


def _token_span(offsets: list[tuple[int, int]], chars: tuple[int, int]) -> list[int]:
    """Indices of the (non-special) tokens overlapping a character span."""
    a, b = chars
    return [i for i, (s, e) in enumerate(offsets) if e > s and s < b and e > a]


def encode_sentence(tokenizer, template: str, values: dict[str, str], word: str) -> Encoded:
    """Tokenise a rendered template once (with offsets) and locate the word's copies and spans.

    The word is looked up by its character span, so a word split into several tokens, or merged
    with a neighbour, is an error here rather than a silently wrong position.
    """
    text, spans = _render(template, values)
    enc = tokenizer(text, add_special_tokens=True, return_offsets_mapping=True)
    ids, offsets = enc.input_ids, [tuple(o) for o in enc.offset_mapping]
    target = word_token_id(tokenizer, word)
    prefix_chars = spans["prefix"]
    in_prefix = values["prefix"].rfind(word)
    old_chars = (prefix_chars[0] + in_prefix, prefix_chars[0] + in_prefix + len(word))
    positions = {}
    for name, chars in (("old", old_chars), ("new", spans.get("word", old_chars))):
        tokens = _token_span(offsets, chars)
        if len(tokens) != 1 or ids[tokens[0]] != target:
            raise ValueError(f"{word!r} is not one token {target} at its place in {text!r} for this "
                             f"tokenizer (found tokens {[ids[t] for t in tokens]})")
        positions[name] = tokens[0]
    prefix_tokens = _token_span(offsets, prefix_chars)
    prefix = (0, prefix_tokens[-1] + 1)  # leading special tokens belong to what is cached
    cont = _token_span(offsets, spans["continuation"]) if "continuation" in spans else []
    continuation = (cont[0], cont[-1] + 1) if cont else (0, 0)
    return Encoded(ids, positions["new"], positions["old"], prefix, continuation)


def encode_reference(tokenizer, sentence: str, word: str) -> Encoded:
    """A reference sentence: the word's first occurrence as its single token."""
    ids = tokenizer(sentence, add_special_tokens=True).input_ids
    target = word_token_id(tokenizer, word)
    if target not in ids:
        raise ValueError(f"reference {sentence!r} does not contain {word!r} as the token {target}")
    position = ids.index(target)
    return Encoded(ids, position, position, (0, 0), (0, 0))


@dataclass
class WordItems:
    """Every sentence one word needs, for one tokenizer; index [s] is sense s."""

    word: Word
    contexts: list[Encoded]
    repeats: list[Encoded]
    references: list[list[Encoded]]


def build_items(tokenizer, words: list[Word], repeat_template: str = DEFAULT_REPEAT_TEMPLATE,
                with_repeats: bool = True) -> list[WordItems]:
    """Encode contexts, repeats and references of every word; checks that the prefix tokens are
    literally the same under both continuations (otherwise the comparison would be meaningless)."""
    items, problems = [], []
    for w in words:
        try:
            contexts, repeats = [], []
            for sense in w.senses:
                values = {"prefix": w.prefix, "continuation": sense.continuation, "word": w.word}
                contexts.append(encode_sentence(tokenizer, CONTEXT_TEMPLATE, values, w.word))
                if with_repeats:
                    try:
                        repeats.append(encode_sentence(tokenizer, repeat_template, values, w.word))
                    except ValueError as err:
                        raise ValueError(f"with repeat_template {repeat_template!r}: {err}") from None
            a, b = contexts
            if a.ids[:a.prefix[1]] != b.ids[:b.prefix[1]]:
                raise ValueError(f"the prefix {w.prefix!r} tokenises differently before its two "
                                 "continuations (start each continuation with a space or punctuation)")
            refs = [[encode_reference(tokenizer, r, w.word) for r in sense.references] for sense in w.senses]
            items.append(WordItems(w, contexts, repeats, refs))
        except ValueError as err:
            problems.append(f"{w.word!r}: {err}")
    if problems:
        raise ValueError("senses_file: words unusable with this tokenizer:\n  " + "\n  ".join(problems))
    return items


# --------------------------------------------------------------------------- batched forward passes


@dataclass
class Forward:
    """What one batched pass returns for a list of sentences."""

    states: torch.Tensor  # (n, layers + 1, hidden) at each sentence's `word` token
    keys: list[torch.Tensor] | None  # per sentence, (layers, prefix_len, key_features)
    attention: torch.Tensor | None  # (n, layers, heads, seq) the `word` token's attention row, zero-padded


def _prefix_keys(loaded: Loaded, captured: dict, cache, row: int, prefix_len: int) -> torch.Tensor:
    """Per layer, the keys the prefix's tokens would cache: (layers, prefix_len, features)."""
    if loaded.family == "encoder":
        return torch.stack([captured[name][row, :prefix_len] for name in bert_key_modules(loaded.model)])
    # (batch, kv_heads, seq, head_dim) -> (prefix_len, kv_heads * head_dim), per layer
    return torch.stack([layer.keys[row, :, :prefix_len].transpose(0, 1).flatten(1) for layer in cache.layers])


@torch.inference_mode()
def forward(loaded: Loaded, sentences: list[Encoded], batch_size: int = 32, keys: bool = False,
            attention: bool = False, desc: str = "") -> Forward:
    """States at each sentence's word (embeddings + every layer; transformers reports the last
    layer after the final norm), optionally the prefix's keys and the word's attention rows.
    Attention rows need the model loaded with `attn_implementation="eager"`."""
    from transformers import DynamicCache

    model, pad = loaded.model, loaded.tokenizer.pad_token_id or 0
    states, key_list, rows = [], [] if keys else None, []
    longest = max(len(s.ids) for s in sentences)
    key_names = bert_key_modules(model) if keys and loaded.family == "encoder" else []
    for start in tqdm(range(0, len(sentences), batch_size), desc=desc or f"{loaded.name} states",
                      unit="batch", disable=len(sentences) <= batch_size):
        batch = sentences[start:start + batch_size]
        width = max(len(s.ids) for s in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, s in enumerate(batch):  # right padding: real tokens keep positions 0..len-1
            ids[row, :len(s.ids)] = torch.tensor(s.ids)
            mask[row, :len(s.ids)] = 1
        extra = {}
        cache = None
        if keys and loaded.family == "causal":
            # no config: every layer keeps every position (a sliding-window layer's cache would drop
            # old ones of a long padded batch; the keys themselves do not depend on the window)
            cache = DynamicCache()
            extra = dict(cache=cache, use_cache=True)
        with capture_outputs(model, key_names) as captured:
            out = model.base_model(input_ids=ids.to(loaded.device), attention_mask=mask.to(loaded.device),
                                   output_hidden_states=True, output_attentions=attention, **extra)
        where = torch.tensor([s.word for s in batch], device=loaded.device)
        hidden = torch.stack(out.hidden_states, dim=1)  # (batch, layers + 1, seq, hidden)
        states.append(hidden[torch.arange(len(batch)), :, where].cpu())
        if keys:
            for row, s in enumerate(batch):
                key_list.append(_prefix_keys(loaded, captured, cache, row, s.prefix[1]).cpu())
        if attention:
            att = torch.stack(out.attentions, dim=1)  # (batch, layers, heads, seq, seq)
            row_att = att[torch.arange(len(batch)), :, :, where]  # (batch, layers, heads, seq)
            rows.append(torch.nn.functional.pad(row_att, (0, longest - width)).cpu())
    return Forward(torch.cat(states), key_list, torch.cat(rows) if attention else None)


# --------------------------------------------------------------------------- the probe


def distances(x: torch.Tensor, centroids: torch.Tensor, distance: str) -> torch.Tensor:
    """x (..., d) against centroids (..., k, d) -> (..., k), computed in float64."""
    x, centroids = x.double().unsqueeze(-2), centroids.double()
    if distance == "cosine":
        return 1 - torch.nn.functional.cosine_similarity(x, centroids, dim=-1)
    if distance == "euclidean":
        return (x - centroids).norm(dim=-1)
    raise ValueError(f"distance: {distance!r} not allowed; choose one of {DISTANCES}")


def nearest_centroid_right(states: torch.Tensor, centroids: torch.Tensor, distance: str) -> torch.Tensor:
    """Per item and layer, whether the item is classified as its own sense: (words, senses, layers).

    states: (words, senses, layers, d), item [w, s] is word w read in sense s's context;
    centroids: (words, senses, layers, d). Ties go to sense 0, so two identical states are always
    given the same label: one right, one wrong.
    """
    per_item = centroids.transpose(1, 2).unsqueeze(1)  # (words, 1, layers, senses, d)
    d = distances(states, per_item, distance)  # (words, senses, layers, senses)
    predicted = d.argmin(-1)  # (words, senses, layers)
    truth = torch.arange(states.shape[1])[None, :, None]
    return predicted == truth


def nearest_centroid_accuracy(states: torch.Tensor, centroids: torch.Tensor, distance: str) -> torch.Tensor:
    """Per layer, the share of items classified as their own sense (see `nearest_centroid_right`)."""
    return nearest_centroid_right(states, centroids, distance).double().mean(dim=(0, 1))  # (layers,)


def _per_depth(right: torch.Tensor) -> list[list[int]]:
    """(words, senses, layers) right/wrong -> per depth, per item (word-major) 1/0."""
    return right.flatten(0, 1).T.int().tolist()  # (layers, items)


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """1 − cos(a, b) along the last axis, in float64, as ‖â − b̂‖² / 2 (â = a/‖a‖): the same
    quantity, but never negative and exactly 0 for identical vectors, where 1 − cos can round to
    ±1e-16."""
    a, b = a.double(), b.double()
    unit_a, unit_b = a / a.norm(dim=-1, keepdim=True), b / b.norm(dim=-1, keepdim=True)
    return (unit_a - unit_b).pow(2).sum(-1) / 2


# --------------------------------------------------------------------------- one model's measurements


@dataclass
class WordStates:
    """One model's states for every word, as (words, senses, layers + 1, hidden) tensors."""

    old: torch.Tensor  # the word at its old (cached) position, in each sense's context
    new: torch.Tensor | None  # the repeated word at its new position (causal models)
    centroids: torch.Tensor  # mean state over each sense's reference sentences
    prefix_keys: list[list[torch.Tensor]] | None  # [word][sense] (layers, prefix_len, features)
    attention: torch.Tensor | None  # (words, senses, layers, heads, seq): the new copy's rows
    repeats: list[list[Encoded]] | None  # [word][sense], to read spans of the attention rows


def word_states(loaded: Loaded, items: list[WordItems], keys: bool = False, attention: bool = False,
                batch_size: int = 32) -> WordStates:
    """All sentences of all words in batched passes: contexts (with the prefix's keys), repeats
    (with their attention rows) and references."""
    n_words = len(items)
    contexts = [c for it in items for c in it.contexts]
    repeats = [r for it in items for r in it.repeats]
    refs = [r for it in items for sense in it.references for r in sense]
    ctx = forward(loaded, contexts, batch_size, keys=keys, desc=f"{loaded.name} contexts")
    shape = (n_words, 2, *ctx.states.shape[1:])
    new = att = None
    if repeats:
        rep = forward(loaded, repeats, batch_size, attention=attention, desc=f"{loaded.name} repeats")
        new = rep.states.reshape(shape)
        att = rep.attention.reshape(n_words, 2, *rep.attention.shape[1:]) if attention else None
    ref_states = forward(loaded, refs, batch_size, desc=f"{loaded.name} references").states
    centroids, i = torch.empty(shape, dtype=ref_states.dtype), 0
    for w, it in enumerate(items):
        for s, sense in enumerate(it.references):
            centroids[w, s] = ref_states[i:i + len(sense)].mean(0)
            i += len(sense)
    prefix_keys = [ctx.keys[2 * w:2 * w + 2] for w in range(n_words)] if keys else None
    return WordStates(ctx.states.reshape(shape), new, centroids, prefix_keys, att,
                      [it.repeats for it in items] if repeats else None)


def context_divergence(ws: WordStates) -> dict:
    """Chapter 2: per layer, how far the word's state and the prefix's keys move between the two
    contexts. Keys: ‖K_a − K_b‖ / ‖K_a‖ over all prefix positions, per layer (layer 1 first)."""
    dist = cosine_distance(ws.old[:, 0], ws.old[:, 1])  # (words, layers + 1)
    out = {"cosine_distance_mean": dist.mean(0).tolist(), "cosine_distance_max": dist.max(0).values.tolist(),
           "states_bit_identical_words": sum(torch.equal(pair[0], pair[1]) for pair in ws.old),
           "n_words": ws.old.shape[0]}
    if ws.prefix_keys is not None:
        rel = torch.stack([(a.double() - b.double()).flatten(1).norm(dim=1) / a.double().flatten(1).norm(
            dim=1)
                           for a, b in ws.prefix_keys])  # (words, layers)
        out["key_relative_diff_mean"] = rel.mean(0).tolist()
        out["key_relative_diff_max"] = rel.max(0).values.tolist()
    return out


def attention_split(ws: WordStates) -> dict:
    """Per layer, mean over heads and items of the new copy's attention on the continuation, on
    the first token (the sink), on the old copy of the word, and on everything else.

    Each part is summed from the attention weights over its own positions ("rest": every position
    in none of the other three), so the four parts summing to one is a check on the softmax rows
    and on the spans (disjoint, covering the row), not an identity. `per_item` keeps each item's
    shares ([item][layer]) for the paired comparisons of the page."""
    parts = {"continuation": [], "first_token": [], "old_word": [], "rest": []}
    for w, by_sense in enumerate(ws.repeats):
        for s, enc in enumerate(by_sense):
            row = ws.attention[w, s].double().mean(1)  # (layers, seq), mean over heads
            c0, c1 = enc.continuation
            rest = torch.ones(row.shape[-1], dtype=torch.bool)  # positions in none of the named parts
            rest[c0:c1] = False
            rest[[0, enc.old_word]] = False
            for name, value in (("continuation", row[:, c0:c1].sum(-1)), ("first_token", row[:, 0]),
                                ("old_word", row[:, enc.old_word]), ("rest", row[:, rest].sum(-1))):
                parts[name].append(value)
    out = {name: torch.stack(values).mean(0).tolist() for name, values in parts.items()}
    out["per_item"] = {name: torch.stack(values).tolist() for name, values in parts.items()}  # [item][layer]
    return out


def probe(ws: WordStates, distance: str) -> dict:
    """Chapter 3: per depth (embeddings first), nearest-centroid accuracy (%) at the old position
    and, where there is one, at the new position; with every item's outcome per depth
    (`*_right`: [depth][item], 1 right, 0 wrong) so the tests against chance can be recomputed."""
    old = nearest_centroid_right(ws.old, ws.centroids, distance)
    out = {"old_position_pct": (100 * old.double().mean(dim=(0, 1))).tolist(),
           "old_position_right": _per_depth(old),
           "n_items": ws.old.shape[0] * ws.old.shape[1], "distance": distance}
    if ws.new is not None:
        new = nearest_centroid_right(ws.new, ws.centroids, distance)
        out["new_position_pct"] = (100 * new.double().mean(dim=(0, 1))).tolist()
        out["new_position_right"] = _per_depth(new)
    return out
