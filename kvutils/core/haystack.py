"""Long-range retrieval prompts: a key hidden at a chosen depth of a long haystack, then asked for.

Two needle shapes, both from the literature:
- `passkey` (Mohtashami & Jaggi 2023): "The pass key is 48213. Remember it. 48213 is the pass key.",
  a random 5-digit key, asked as "What is the pass key? The pass key is";
- `magic` (RULER's multi-key needle, Hsieh et al. 2024): "One of the special magic numbers for
  <word> is: <7 digits>.", several of them with different words, one asked for.
A haystack asked several questions (`turns` > 1: issue 51's follow-ups) carries one needle per
turn, each of another shape (`SHAPES`: RULER's magic number, a door code, a phone number; each a word
and 7 digits), so that a question matches its own needle's words only. With one shape for all, a
135M model's answers to a follow-up began with the first digit of the previous turn's answer (an
induction copy: the questions' closing words are the same), and the exact cache fell below the gate.
The haystack is either the classic repeated filler ("The grass is green. The sky is blue. ...") or
real documents of a corpus (`kvutils.core.data.load_corpus`: pydoc, a folder, a .jsonl), whole
sentences in document order. Every prompt is exactly `context` tokens:

    [BOS] haystack-before  needle  haystack-after  question  answer
                           ^ depth x haystack tokens, moved to the nearest sentence boundary
                             (a sentence longer than MAX_PIECE tokens counts as pieces of that many)

Prompts are token ids built piece by piece (each sentence tokenised alone), so where each part
lies is known exactly; `Prompt.needle` is the asked needle's token span. Same arguments, same
prompts: keys, words and documents come from `random.Random(seed)`.
"""
from __future__ import annotations

import bisect
import random
import re
from dataclasses import dataclass, field

from kvutils.core import checks
from kvutils.core.data import Document, load_corpus

FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again."
PASSKEY_NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key."
PASSKEY_QUESTION = " What is the pass key? The pass key is"
MAGIC_NEEDLE = " One of the special magic numbers for {word} is: {key}."
MAGIC_QUESTION = (" What is the special magic number for {word} mentioned in the provided text? "
                  "The special magic number for {word} mentioned in the provided text is")
DOOR_NEEDLE = " The code to open the {word} door is {key}. Remember it. {key} opens the {word} door."
DOOR_QUESTION = " What is the code to open the {word} door? The code to open the {word} door is"
PHONE_NEEDLE = " The phone number of the {word} shop is {key}."
PHONE_QUESTION = " What is the phone number of the {word} shop? The phone number of the {word} shop is"
TEMPLATES = {"passkey": (PASSKEY_NEEDLE, PASSKEY_QUESTION), "magic": (MAGIC_NEEDLE, MAGIC_QUESTION),
             "door": (DOOR_NEEDLE, DOOR_QUESTION), "phone": (PHONE_NEEDLE, PHONE_QUESTION)}
# the shapes of a haystack asked several questions, one needle each: RULER's first, then two of ours
SHAPES = ("magic", "door", "phone")
KEY_DIGITS = {"passkey": 5, "magic": 7, "door": 7, "phone": 7}  # the pass key test's 5 digits; RULER's 7
NEEDLES = ("passkey", "magic")
HAYSTACKS_BUILTIN = ("filler",)  # besides a corpus name or path
# RULER draws the keys' words from a word list; ours are everyday nouns
WORDS = ("apple", "river", "garden", "window", "candle", "pencil", "mountain", "basket", "violin", "harbor",
         "lantern", "meadow", "saddle", "tunnel", "button", "island", "marble", "jacket", "pepper", "rocket",
         "ladder", "kettle", "forest", "mirror")
MAX_PIECE = 32  # tokens: a longer sentence is cut, so that the needle's boundary is near its depth
MIN_CONTEXT = 128  # shorter prompts leave too little haystack to hide a needle in
MAX_CONTEXT = 131_072  # a prompt longer than this is refused by name (no model here holds more)
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Prompt:
    """One retrieval question, as token ids with its parts' positions (document positions)."""

    ids: tuple[int, ...]  # (context,) the whole prompt, answer included
    question: int  # first position of the question (= end of the haystack with its needles)
    answer: int  # first position of the answer's tokens (the key, as the model would write it)
    needle: tuple[int, int]  # the asked needle's token span [start, end)
    depth: float  # where the needle was asked to go, as a share of the haystack
    context: int
    key: str
    word: str | None  # the magic needle's word (None for the pass key)
    haystack: str
    documents: tuple[str, ...] = field(default=())  # the corpus documents the haystack is cut from
    # answer tokens before the key's digits: the separator (a space) where it is a token of its own
    key_from: int = 0
    # the follow-up turns (`build_prompt`'s `followups`): each a Prompt over the chain so far (this prompt,
    # then each turn's question and answer), asking another needle of the same haystack; () for one question
    followups: tuple = ()
    shape: str = ""  # the asked needle's shape (a key of TEMPLATES)

    @property
    def answer_length(self) -> int:
        return len(self.ids) - self.answer

    @property
    def chain(self) -> tuple[int, ...]:
        """The whole conversation's ids: this prompt, then every follow-up's question and answer."""
        return self.followups[-1].ids if self.followups else self.ids

    def record(self) -> dict:
        """What a results file keeps of the prompt (not its ids); "followups" only where it has some."""
        out = {"depth": self.depth, "context": self.context, "needle": list(self.needle), "key": self.key,
               "word": self.word, "haystack": self.haystack, "documents": list(self.documents)}
        if self.followups:
            out["shape"] = self.shape
            out["followups"] = [{"depth": f.depth, "needle": list(f.needle), "key": f.key, "word": f.word,
                                 "shape": f.shape, "question": f.question, "answer": f.answer}
                                for f in self.followups]
        return out


def check_depths(value, parameter: str = "depths") -> list[float]:
    """"0.1,0.5,0.9" or a list -> depths, each strictly between 0 and 1."""
    if isinstance(value, (list, tuple)):
        items = list(value)
    else:  # text, or one depth as papermill passes `-p retrieval_depths 0.5`
        items = checks.split_items(parameter, value, example="0.1,0.5,0.9")
    out = []
    for item in items:
        try:
            depth = float(item)
        except (TypeError, ValueError):
            raise ValueError(f"{parameter}: {item!r} is not a number; give depths between 0 and 1, "
                             'e.g. "0.1,0.5,0.9"') from None
        if not 0.0 < depth < 1.0:
            raise ValueError(f"{parameter}: {item!r} is outside (0, 1); a depth is a share of the haystack, "
                             "strictly between its start (0) and its end (1)")
        out.append(depth)
    checks.no_repeats(parameter, out)
    return out


def default_needle(haystack: str) -> str:
    """The filler gets the classic pass key; real text gets RULER's magic numbers (a pass key in
    real text is a different, harder task: the model may answer about the text instead)."""
    return "passkey" if haystack == "filler" else "magic"


def _sentences(text: str) -> list[str]:
    return [s for s in _SENTENCE.split(" ".join(text.split())) if s]


class Haystack:
    """Sentences to cut haystacks from, tokenised lazily: the filler, or a corpus's documents."""

    def __init__(self, name: str, tokenizer, parameter: str = "haystack"):
        self.name, self.tokenizer = name, tokenizer
        if name == "filler":
            self.docs = [Document("filler", FILLER)]
        else:
            self.docs = load_corpus(name, parameter=parameter)
        self._tokens: dict[int, list[list[int]]] = {}

    def sentences(self, d: int) -> list[list[int]]:
        """Document d's sentences as token ids, each with a leading space (no special tokens); one
        longer than MAX_PIECE tokens (code, a table) is cut into pieces of that many, so that a
        needle lands within MAX_PIECE / 2 tokens of its depth."""
        if d not in self._tokens:
            pieces = []
            for sentence in _sentences(self.docs[d].text):
                ids = self.tokenizer(" " + sentence, add_special_tokens=False).input_ids
                pieces += [ids[i:i + MAX_PIECE] for i in range(0, len(ids), MAX_PIECE)]
            self._tokens[d] = pieces
        return self._tokens[d]

    def cut(self, start_doc: int, tokens: int) -> tuple[list[list[int]], tuple[str, ...]]:
        """Whole sentences from document `start_doc` on (wrapping round the corpus; the filler
        repeats) until `tokens` are filled, the last sentence cut to fit. Returns (sentences, ids
        of the documents used)."""
        out, used, have, d = [], [], 0, start_doc
        for _ in range(len(self.docs) * 64 if self.name != "filler" else 10**9):
            doc = d % len(self.docs)
            if not used or used[-1] != self.docs[doc].id:
                used.append(self.docs[doc].id)
            for sentence in self.sentences(doc):
                take = sentence[:tokens - have]
                out.append(take)
                have += len(take)
                if have == tokens:
                    return out, tuple(dict.fromkeys(used))
            d += 1
        raise ValueError(f"haystack: {self.name!r} holds fewer than {tokens} tokens of text")


def _needle_text(shape: str, key: str, word: str | None) -> str:
    return TEMPLATES[shape][0].format(key=key, word=word)


def _question_text(shape: str, word: str | None) -> str:
    return TEMPLATES[shape][1].format(word=word)


def turn_shapes(i: int, turns: int) -> list[str]:
    """Prompt i's needles' shapes in the order they are asked (turns > 1): SHAPES from
    SHAPES[(i // len(SHAPES)) mod len(SHAPES)] on, so that with the depths' rotation
    (`turn_depths`, which cycles with i) every depth meets every shape first over 9 prompts."""
    if turns == 1:
        return ["magic"]
    start = (i // len(SHAPES)) % len(SHAPES)
    return [SHAPES[(start + t) % len(SHAPES)] for t in range(turns)]


def _key(rng: random.Random, digits: int) -> str:
    return str(rng.randrange(10 ** (digits - 1), 10 ** digits))


def build_prompt(tokenizer, hay: Haystack, context: int, depth: float, needle: str, rng: random.Random,
                 start_doc: int, distractors: int = 0, followups: tuple[float, ...] = (),
                 shapes: tuple[str, ...] = ()) -> Prompt:
    """One prompt of exactly `context` tokens: the asked needle at `depth` of the haystack (at the
    sentence boundary nearest it), one more magic needle (another word and number) at each depth of
    `followups`, `distractors` more at random boundaries, then the question and the key as the
    answer. Each follow-up needle's question and answer then extend the chain in turn (beyond
    `context`: `Prompt.followups`). `shapes`: the asked needles' shapes, one per question (default:
    `needle` for all); distractors take `needle`'s."""
    extra = len(followups)
    shapes = tuple(shapes) or (needle,) * (1 + extra)
    if len(shapes) != 1 + extra:
        raise ValueError(f"shapes: {len(shapes)} given for {1 + extra} questions")
    shapes += (needle,) * distractors
    words = rng.sample(WORDS, 1 + extra + distractors) if needle == "magic" else [None] * (1 + distractors)
    keys = [_key(rng, KEY_DIGITS[shape]) for shape in shapes]
    encode = lambda text: tokenizer(text, add_special_tokens=False).input_ids  # noqa: E731
    bos = tokenizer("", add_special_tokens=True).input_ids  # the BOS token where the model has one
    needles = [encode(_needle_text(shape, k, w)) for shape, k, w in zip(shapes, keys, words)]
    question, answer = encode(_question_text(shapes[0], words[0])), encode(" " + keys[0])
    space = encode(" ")
    key_from = len(space) if space and answer[:len(space)] == space and len(answer) > len(space) else 0
    fill = context - len(bos) - sum(map(len, needles)) - len(question) - len(answer)
    if fill < 8 * (1 + distractors):
        raise ValueError(f"context: {context} tokens leave {fill} for the haystack around the needle "
                         f"(needle, question and answer take {context - fill}); give a longer context")
    sentences, documents = hay.cut(start_doc, fill)
    ends = [0]
    for s in sentences:
        ends.append(ends[-1] + len(s))  # token offset after each sentence: the boundaries
    places = [nearest_boundary(ends, d * fill) for d in (depth, *followups)]
    for _ in range(distractors):
        places.append(rng.randrange(len(ends)))
    inserts = sorted(zip(places, range(len(needles))))
    ids, spans, at = list(bos), {}, 0
    for boundary, n in inserts:
        for s in sentences[at:boundary]:
            ids += s
        at = max(at, boundary)
        spans[n] = (len(ids), len(ids) + len(needles[n]))
        ids += needles[n]
    for s in sentences[at:]:
        ids += s
    q = len(ids)
    ids += question
    a = len(ids)
    ids += answer
    assert len(ids) == context, (len(ids), context)
    turns, chain = [], list(ids)
    for n, d in enumerate(followups, start=1):
        fq = len(chain)
        chain += encode(_question_text(shapes[n], words[n]))
        fa = len(chain)
        chain += encode(" " + keys[n])
        turns.append(Prompt(tuple(chain), fq, fa, spans[n], d, context, keys[n], words[n], hay.name,
                            documents,
                            key_from, shape=shapes[n]))
    return Prompt(tuple(ids), q, a, spans[0], depth, context, keys[0], words[0], hay.name, documents,
                  key_from,
                  tuple(turns), shapes[0])


def build_prompts(tokenizer, haystack: str, contexts: list[int], depths: list[float], n_prompts: int,
                  needle: str | None = None, distractors: int | None = None, seed: int = 0,
                  parameter: str = "haystack", turns: int = 1) -> list[Prompt]:
    """`n_prompts` per context, depths taken in turn (so n_prompts / len(depths) per depth), each
    prompt's haystack starting at another document. Keys and words come from `seed`. `distractors`
    (magic needles only; default none) adds RULER's multi-key shape: other words' numbers. `turns`
    > 1 (magic needles only): each haystack carries that many needles, at the depths following the
    first in turn (`turn_depths`), each of another shape (`turn_shapes`), asked one after another in
    one conversation."""
    needle = needle or default_needle(haystack)
    checks.check_choice("needle", needle, NEEDLES)
    checks.check_int("n_prompts", n_prompts, 1, 10_000)
    distractors = 0 if distractors is None else distractors
    checks.check_int("distractors", distractors, 0, len(WORDS) - 1)
    if needle == "passkey" and distractors:
        raise ValueError("distractors: the pass key has one needle; distractors are for the magic numbers")
    checks.check_int("turns", turns, 1, min(len(depths), len(SHAPES)))
    if needle == "passkey" and turns > 1:
        raise ValueError("turns: the pass key has one needle, so one question; follow-ups need the magic "
                         "numbers")
    hay = Haystack(haystack, tokenizer, parameter)
    rng = random.Random(seed)
    out = []
    for context in contexts:
        checks.check_int("context", context, MIN_CONTEXT, MAX_CONTEXT)
        for i in range(n_prompts):
            start = (i * 7) % len(hay.docs)  # a different document for each prompt, in a fixed order
            first, *later = turn_depths(depths, i, turns)
            shapes = tuple(turn_shapes(i, turns)) if turns > 1 else ()
            out.append(build_prompt(tokenizer, hay, context, first, needle, rng, start, distractors,
                                    tuple(later),
                                    shapes))
    return out


def turn_depths(depths: list[float], i: int, turns: int) -> list[float]:
    """Prompt i's needles' depths in the order they are asked: from depths[i mod len(depths)] on, in
    turn, so that over len(depths) prompts every depth is asked first once and as each follow-up
    once (turns <= len(depths))."""
    return [depths[(i + t) % len(depths)] for t in range(turns)]


def nearest_boundary(ends: list[int], target: float) -> int:
    """Index of the value of sorted `ends` nearest `target` (ties: the earlier)."""
    i = bisect.bisect_left(ends, target)
    if i == 0:
        return 0
    if i == len(ends):
        return len(ends) - 1
    return i - 1 if target - ends[i - 1] <= ends[i] - target else i
