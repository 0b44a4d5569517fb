"""What the attention explorer shows, computed once and shared by its two faces: the live
ipywidgets panel (`kvutils.explorer.widgets`) and the page's offline view (`kvutils.explorer.html`).

- `attention_maps` reads every layer's attention weights for one text;
- `differing_spans` finds the disambiguating span of a pair of texts;
- `compute_view` selects one layer / head / query from two texts' maps;
- `record` + `pack` store, for the book, every causal model x word pair x construction, both
  texts, every layer and head and every query row, as 8-bit weights (rounded to 1/255, so within
  0.002 of the model's) in one gzip'd, base64'd blob; `unpack_matrix` reads one matrix back the
  way the page's JavaScript does (the tests compare the two).
"""
from __future__ import annotations

import base64
import gzip
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch

from kvutils.core import data
from kvutils.models.loading import Loaded, load
from kvutils.studies.sense_probes import probes

CONSTRUCTIONS = {"repeat": probes.DEFAULT_REPEAT_TEMPLATE, "context": probes.CONTEXT_TEMPLATE}
LEVELS = 255  # weights are stored as round(w * 255) in one byte
FORMAT = 1


@dataclass
class AttentionMaps:
    """One text's attention in every layer and head."""

    tokens: list[str]
    maps: torch.Tensor  # (layers, heads, seq, seq), rows are queries


@torch.inference_mode()
def attention_maps(loaded: Loaded, text: str) -> AttentionMaps:
    """Attention weights of every layer for one text (the model must use eager attention)."""
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids.to(loaded.device)
    out = loaded.model(input_ids=ids, output_attentions=True, use_cache=False, logits_to_keep=1)
    if not out.attentions or out.attentions[0] is None:
        raise ValueError(f"{loaded.name} returned no attention weights: load it with "
                         "attn_implementation='eager'")
    maps = torch.stack([a[0] for a in out.attentions]).float().cpu()  # (layers, heads, seq, seq)
    return AttentionMaps(loaded.tokenizer.convert_ids_to_tokens(ids[0].tolist()), maps)


def differing_spans(a: list[str], b: list[str]) -> tuple[tuple[int, int], tuple[int, int]]:
    """The token span of each text between their common beginning and their common ending: the
    disambiguating text, when the two share a prefix (and, in the repeat construction, an end)."""
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    end = 0
    while end < min(len(a), len(b)) - start and a[-1 - end] == b[-1 - end]:
        end += 1
    return (start, len(a) - end), (start, len(b) - end)


def readable(token: str) -> str:
    """A token as it reads, with the tokenizers' space markers (GPT-2's Ġ, SentencePiece's ▁) as ␣."""
    return token.replace("Ġ", "␣").replace("▁", "␣")


def pair_texts(word: data.Word, template: str) -> tuple[str, str]:
    """The word's two sentences (one per sense) in a construction."""
    a, b = (template.format(prefix=word.prefix, continuation=s.continuation,
                            word=word.word) for s in word.senses)
    return a, b


@dataclass
class ContextView:
    """What one side of the explorer shows."""

    tokens: list[str]
    query: int  # token index of the query
    row: torch.Tensor  # (seq,) the query's attention, zero after the query (causal)
    window: torch.Tensor  # (rows, seq) attention of the window of queries ending at `query`
    window_start: int  # token index of the window's first query row
    span: tuple[int, int]  # the disambiguating span [start, stop)


@dataclass
class View:
    model: str
    layer: int  # 0-based
    head: int | None  # None: mean over heads
    contexts: tuple[ContextView, ContextView]


def compute_view(model: str, maps: tuple[AttentionMaps, AttentionMaps], layer: int, head: int | None,
                 from_end: int, window: int) -> View:
    """Select one layer/head, the query `from_end` tokens before each text's last, and a window of
    `window` query rows ending there."""
    spans = differing_spans(maps[0].tokens, maps[1].tokens)
    views = []
    for m, span in zip(maps, spans):
        layer_maps = m.maps[layer]  # (heads, seq, seq)
        matrix = layer_maps.mean(0) if head is None else layer_maps[head]
        query = max(len(m.tokens) - 1 - from_end, 0)
        start = max(query - window + 1, 0)
        views.append(ContextView(m.tokens, query, matrix[query], matrix[start:query + 1], start, span))
    return View(model, layer, head, (views[0], views[1]))


# --------------------------------------------------------------------------- the book's recording


def quantize(maps: torch.Tensor) -> bytes:
    """(layers, heads, n, n) causal maps -> the lower triangles as bytes, layer-major, then head,
    then query row, then key (row q holds q + 1 keys, starting at q(q+1)/2)."""
    n = maps.shape[-1]
    rows, cols = torch.tril_indices(n, n)  # row-major: row 0, then row 1, ...
    triangle = maps[..., rows, cols]  # (layers, heads, n(n+1)/2)
    return (triangle * LEVELS).round().clamp(0, LEVELS).to(torch.uint8).contiguous().numpy().tobytes()


def record(loaded: Loaded, words: Iterable[data.Word], constructions: Mapping[str, str],
           progress: bool = True) -> tuple[dict, bytes]:
    """One model's part of the explorer's data: (its description, its bytes). The description says,
    for every word and construction, both texts, their readable tokens, their differing span and
    where their maps lie in the bytes: from `offset`, one triangle of `stored_n` tokens per layer
    and head. A text whose tokens begin another text of the same side (the "context" construction
    is the "repeat" one without its last words) is not stored again: a causal model's attention
    rows never depend on later tokens, so its rows are the first rows of the longer text's."""
    from tqdm import tqdm

    words = list(words)
    chunks, offset = [], 0
    pairs: dict[str, dict[str, list[dict]]] = {}
    for word in tqdm(words, desc=f"{loaded.name} explorer maps", unit="word", disable=not progress):
        texts = {c: pair_texts(word, template) for c, template in constructions.items()}
        tokens = {(c,
                   side): loaded.tokenizer.convert_ids_to_tokens(loaded.tokenizer(texts[c][side]).input_ids)
                  for c in constructions for side in (0, 1)}
        stored: dict[tuple[str, int], dict] = {}
        # longest first, so that a shorter text can point into a longer one's maps
        for c, side in sorted(tokens, key=lambda key: -len(tokens[key])):
            host = next((stored[k] for k in stored if k[1] == side
                         and tokens[k][:len(tokens[c, side])] == tokens[c, side]), None)
            if host is None:
                maps = attention_maps(loaded, texts[c][side])
                if maps.tokens != tokens[c, side]:
                    raise RuntimeError(f"{loaded.name}: the tokenizer and the model read {texts[c][side]!r} "
                                       "differently")
                chunk = quantize(maps.maps)
                host = {"offset": offset, "stored_n": len(maps.tokens)}
                chunks.append(chunk)
                offset += len(chunk)
            stored[c, side] = host
        for c in constructions:
            spans = differing_spans(tokens[c, 0], tokens[c, 1])
            pairs.setdefault(word.word, {})[c] = [
                {"text": texts[c][side], "tokens": [readable(t) for t in tokens[c, side]],
                 "span": list(spans[side]),
                 **stored[c, side]} for side in (0, 1)]
    heads = loaded.config.num_attention_heads
    return {"name": loaded.name, "layers": loaded.n_layers, "heads": heads, "pairs": pairs}, b"".join(chunks)


def pack(parts: list[tuple[dict, bytes]], constructions: Mapping[str, str]) -> dict:
    """Every model's part in one JSON-able payload; the bytes are gzip'd (fixed mtime, so the same
    maps give the same page) and base64'd, and each model's offsets move to their place."""
    if not parts:
        raise ValueError("pack: no model recorded")
    models, blob, base = [], [], 0
    for description, chunk in parts:
        shifted = {**description, "pairs": {
            word: {c: [{**side, "offset": side["offset"] + base} for side in sides]
                   for c, sides in by_c.items()}
            for word, by_c in description["pairs"].items()}}
        models.append(shifted)
        blob.append(chunk)
        base += len(chunk)
    raw = b"".join(blob)
    packed = gzip.compress(raw, compresslevel=9, mtime=0)
    return {"format": FORMAT, "levels": LEVELS, "constructions": dict(constructions), "models": models,
            "raw_bytes": len(raw), "blob": base64.b64encode(packed).decode("ascii")}


def unpack_matrix(payload: dict, model: str, word: str, construction: str, side: int, layer: int,
                  head: int | None) -> torch.Tensor:
    """One (n, n) attention matrix back from the payload, as the page computes it: the stored
    weights / 255, and the mean over heads taken of those. `layer` is 0-based."""
    description = next((m for m in payload["models"] if m["name"] == model), None)
    if description is None:
        raise KeyError(f"model {model!r} not recorded; recorded: {[m['name'] for m in payload['models']]}")
    entry = description["pairs"][word][construction][side]
    n, heads = len(entry["tokens"]), description["heads"]
    size, stored_size = n * (n + 1) // 2, entry["stored_n"] * (entry["stored_n"] + 1) // 2
    raw = gzip.decompress(base64.b64decode(payload["blob"]))
    start = entry["offset"] + layer * heads * stored_size
    triangles = torch.frombuffer(bytearray(raw[start:start + heads * stored_size]), dtype=torch.uint8)
    triangles = triangles.view(heads, stored_size)[:, :size].double() / payload["levels"]
    triangle = triangles.mean(0) if head is None else triangles[head]
    matrix = torch.zeros(n, n, dtype=torch.float64)
    rows, cols = torch.tril_indices(n, n)
    matrix[rows, cols] = triangle
    return matrix


def record_study(models: Iterable[str], words: Iterable[data.Word],
                 repeat_template: str = probes.DEFAULT_REPEAT_TEMPLATE,
                 device: str = "cpu", loader: Callable[..., Loaded] | None = None) -> dict:
    """The book's explorer data for chapter 3: every causal model x word x construction (the
    chapter's repeat template, and the context alone), each model loaded in float32 with eager
    attention, one at a time."""
    loader = loader or load
    words, constructions = list(words), {"repeat": repeat_template, "context": probes.CONTEXT_TEMPLATE}
    parts = []
    for name in models:
        loaded = loader(name, "float32", device=device, attn_implementation="eager")
        parts.append(record(loaded, words, constructions))
        del loaded
    return pack(parts, constructions)
