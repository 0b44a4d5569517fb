"""The acceptance test: measure a cache operation on your own model and documents before using it.

    python -m kvutils.accept --model gemma3-270m --op quantize_naive:bits=4 --docs PATH \\
        --prefill 256 --decode 256 [--op window:size=128,sinks=4 ...] [--out results/accept.json]

For each document the first `prefill` tokens fill the cache, the operation modifies it, and the
next `decode` tokens are teacher-forced (`kvutils.cache.scoring`); each fed token is scored on the token
after it, so a document needs prefill + decode + 1 tokens. Reported per operation: the mean
KL(exact || op) of the next-token distributions (nats), top-1 agreement with the exact cache (%),
perplexity on the actual next tokens, the bytes the cache holds after the prefill, and the same
per document. Every parameter is checked, and every document's length, before a model loads.
The command adds each metric's 95 % interval over the documents and a verdict per operation
against the book's near-exact line or `--threshold` (kvutils.cache.accept_report), printed and in
the JSON of --out.
"""
from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from kvutils.cache import accept_args, accept_retrieval
from kvutils.cache.accept_args import NOT_ALL_SCORED
from kvutils.cache.accept_report import decide, table
from kvutils.cache.base import CACHE_OBJECT
from kvutils.cache.methods.exact import Exact
from kvutils.cache.methods.hf_quantized import refusal
from kvutils.cache.prefilled import exact_prefill
from kvutils.cache.registry import parse_ops
from kvutils.cache.scoring import PATHS, STEP_BATCH, score_step_many
from kvutils.cache.sizes import cache_bytes, kept_bytes
from kvutils.cache.step_batched import batched_step, step_start
from kvutils.core import checkpoints, checks, data, results
from kvutils.core.interrupt import OUT_OF_MEMORY
from kvutils.models import loading as models
from kvutils.models.checks import resolve
from kvutils.models.loading import Loaded
from kvutils.models.registry import ModelNotAvailable


def _documents(docs, parameter: str = "docs") -> list[data.Document]:
    if isinstance(docs, (str, Path)):
        return data.load_corpus(str(docs), parameter=parameter)
    out = [d if isinstance(d, data.Document) else data.Document(f"doc{i}", d) for i, d in enumerate(docs)]
    if not out or not all(isinstance(d.text, str) for d in out):
        raise ValueError(f"{parameter}: give a corpus name/path or a non-empty list of texts or Documents")
    return out


def tokenize_documents(tokenizer, docs: list[data.Document], length: int, n_docs: int | None = None,
                       skip_short: bool = False, parameter: str = "docs"):
    """The first `length` token ids of the first `n_docs` documents (all if None), with the
    tokenizer's special tokens (e.g. BOS). A document shorter than `length` is an error naming it,
    unless `skip_short`: then it is left out, reported, and the next long one is taken instead.
    Returns (used [(Document, ids)], skipped [(id, tokens)])."""
    if n_docs is not None:
        checks.check_int("n_docs", n_docs, 1)
    used, short = [], []
    for doc in docs if skip_short else docs[:n_docs]:
        if n_docs is not None and len(used) == n_docs:
            break
        ids = data.first_tokens(tokenizer, doc.text, length)  # a prefix of a long document, not all of it
        if len(ids) < length:
            short.append((doc.id, len(ids)))
        else:
            used.append((doc, torch.tensor(ids)))
    if short and not skip_short:
        cut = {d.id: data.cut_note(d) for d in docs}
        named = ", ".join(f"{i} ({n} tokens{cut.get(i, '')})" for i, n in short)
        raise ValueError(f"{parameter}: documents shorter than prefill + decode + 1 = {length} tokens: "
                         f"{named} (skip_short / --skip-short leaves them out)")
    if not used or (n_docs is not None and len(used) < n_docs):
        raise ValueError(f"{parameter}: n_docs={n_docs or 1} asked for, but only {len(used)} of {len(docs)} "
                         f"documents have {length} tokens")
    return used, short


class Reference:
    """The exact cache's next-token distributions of one document, held in float64 a block of steps
    at a time and computed once, for every operation compared with it: its logits (steps, vocab)
    and the tokens that actually came next (steps,). Float64: nearly equal distributions over a
    large vocabulary need it (fp32 gives KLs of +-1e-8)."""

    @torch.inference_mode()
    def __init__(self, exact: torch.Tensor, targets: torch.Tensor, block: int = 32):
        self.targets, self.block = targets, block
        self.log_probs, self.probs = [], []  # per block of steps: (block, vocab) float64
        for start in range(0, len(targets), block):
            log_exact = torch.log_softmax(exact[start:start + block].double(), dim=-1)
            self.log_probs.append(log_exact)
            self.probs.append(log_exact.exp())
        self.top1 = exact.argmax(-1)
        self.nll = torch.cat([-lp.gather(-1, targets[start:start + block, None])[:, 0]
                              for lp, start in zip(self.log_probs, range(0, len(targets), block))]).cpu()

    @torch.inference_mode()
    def compare(self, approx: torch.Tensor) -> dict:
        """Per-step numbers of the modified cache's logits `approx` (steps, vocab): KL(exact || op),
        top-1 agreement, and the negative log-likelihood of the actual next tokens, each (steps,)."""
        kl, nll = [], []
        for i, start in enumerate(range(0, len(self.targets), self.block)):
            rows = slice(start, start + self.block)
            log_approx = torch.log_softmax(approx[rows].double(), dim=-1)
            kl.append((self.probs[i] * (self.log_probs[i] - log_approx)).sum(-1))
            nll.append(-log_approx.gather(-1, self.targets[rows, None])[:, 0])
        return {"kl": torch.cat(kl).cpu(), "agree": (self.top1 == approx.argmax(-1)).cpu(),
                "nll": torch.cat(nll).cpu(), "nll_exact": self.nll}


def compare(exact: torch.Tensor, approx: torch.Tensor, targets: torch.Tensor, block: int = 32) -> dict:
    """Per-step numbers of one document: logits (steps, vocab) under the exact and the modified
    cache, and the tokens that actually came next (steps,) (see `Reference`, which holds the exact
    side for many operations)."""
    return Reference(exact, targets, block).compare(approx)


def _summary(per_step: list[dict]) -> dict:
    kl = torch.cat([s["kl"] for s in per_step])
    agree = torch.cat([s["agree"] for s in per_step])
    nll = torch.cat([s["nll"] for s in per_step])
    return {"mean_kl": kl.mean().item(), "top1_agreement_pct": 100.0 * agree.double().mean().item(),
            "perplexity": math.exp(nll.mean().item())}


def accept_many(model, ops, docs, prefill: int = 256, decode: int = 256, dtype: str = "float32",
                device: str = "cpu", n_docs: int | None = None, skip_short: bool = False,
                path: str = "fast", progress: bool = True) -> dict:
    """Score several operations on one model load. `model` is a registry name, HF id, local path
    or a `Loaded`; `ops` specs or `CacheOp`s; `docs` "pydoc", a folder of .txt, a .jsonl with a
    "text" field, or a list of texts / `data.Document`s (a `Loaded` keeps its own dtype and
    device). Returns a JSON-ready dict with the exact cache's perplexity and, under "ops" keyed by
    spec, each operation's numbers. The exact reference always takes the fast path; `path="step"`
    scores the operations by the step-by-step reference instead (slow; for checks and timing).
    Operations without a one-forward path (decode-time policies, transformers' cache objects) always
    take the step path ("path" in their numbers). A transformers cache that refuses the model is
    not scored; "refused" names it and why."""
    started = time.time()
    ops = parse_ops(ops)
    checks.check_int("prefill", prefill, 1)
    checks.check_int("decode", decode, 1)
    checks.check_choice("path", path, PATHS)
    checks.check_device(device)
    torch_dtype = models.as_dtype(dtype)
    for op in ops:
        op.check_lengths(prefill, decode)
    loaded, used, skipped = _load_for(model, _documents(docs), prefill + decode + 1, torch_dtype, device,
                                      n_docs,
                                      skip_short, progress)
    refused = {op.spec: why for op in ops if op.kind == CACHE_OBJECT and (why := refusal(loaded.config, op))}
    for spec, why in refused.items():
        print(f"{loaded.name}: {spec} not scored: {why}", file=sys.stderr)
    scored = [op for op in ops if op.spec not in refused]
    for op in scored:
        op.check_model(loaded.config)
    # an op without a one-forward path (it decides while decoding) is scored on the step path
    op_path = {op.spec: path if op.has_fast_path else "step" for op in scored}
    tally = _Tally(scored, op_path, len(used))
    with tqdm(total=len(used), desc=f"accept {loaded.name}", disable=not progress, unit="doc") as bar:
        # `with`: the bar is closed before an interrupt is reported, not redrawn after it
        for group in range(0, len(used), STEP_BATCH):
            _score_or_resume(loaded, tally, used, group, prefill, decode, path, bar)
    nll = torch.cat(tally.exact_nll)
    return {
        "model": loaded.describe(), "prefill": prefill, "decode": decode,
        "dtype": str(loaded.dtype).replace("torch.", ""),
        "device": str(loaded.device), "path": path,
        "documents": [doc.id for doc, _ in used], "skipped_short": [{"id": i, "tokens": n} for i,
                                                                    n in skipped],
        "exact_perplexity": math.exp(nll.mean().item()),
        "exact_perplexity_per_document": [math.exp(x.mean().item()) for x in tally.exact_nll],
        "exact_cache_bytes": cache_bytes(loaded.config, Exact(), prefill, loaded.dtype),
        "exact_seconds": round(tally.exact_seconds, 3),
        "exact_decode_seconds_per_document": [round(x, 4) for x in tally.decode_seconds],
        "ops": {op.spec: _op_numbers(loaded, op, tally, used, prefill) for op in scored}, "refused": refused,
        "seconds": round(time.time() - started, 2),
    }


def _load_for(model, documents: list, needed: int, torch_dtype, device: str, n_docs: int | None,
              skip_short: bool,
              progress: bool) -> tuple:
    """(loaded, used documents, skipped ones): the model's family and context checked, and the
    documents tokenized, before the weights load."""
    if isinstance(model, models.Loaded):
        loaded, tokenizer, family = model, model.tokenizer, model.family
    else:
        resolved = resolve(model, parameter="model")
        family = resolved.family
        if needed > resolved.context:
            raise ValueError(f"prefill + decode + 1 = {needed} exceeds {model}'s context {resolved.context}")
        loaded, tokenizer = None, models.load_tokenizer(model)
    if family != "causal":
        raise ValueError(f"model: {getattr(model, 'name', model)} is an {family} model; the cache test needs "
                         "a causal one")
    used, skipped = tokenize_documents(tokenizer, documents, needed, n_docs, skip_short)
    if skipped and progress:  # named now, and in the numbers' "skipped_short"
        print(f"docs: left out {len(skipped)} document(s) shorter than prefill + decode + 1 = {needed} "
              f"tokens: {', '.join(f'{i} ({n} tokens)' for i, n in skipped)}", file=sys.stderr)
    return (loaded if loaded is not None else models.load(model, torch_dtype, device)), used, skipped


class _Tally:
    """What scoring the documents accumulates, per operation and per document. Step-path presses,
    policies and cache objects (`batched`) are decoded a group of documents at a time, each one's
    start made beside its shared exact prefill (whose layer views are then dropped)."""

    def __init__(self, scored: list, op_path: dict[str, str], n: int):
        self.scored, self.op_path = scored, op_path
        self.batched = [op for op in scored if op_path[op.spec] == "step" and batched_step(op)]
        self.views = any(op.needs_views for op in scored)
        self.per_step = {op.spec: [None] * n for op in scored}
        self.seconds = {op.spec: 0.0 for op in scored}
        self.stats = {op.spec: [{} for _ in range(n)] for op in scored}
        self.exact_nll, self.exact_seconds = [], 0.0
        # per document: the exact decode pass, and each one-document operation's scoring (the time column's
        # pairs)
        self.decode_seconds = [None] * n
        self.doc_seconds = {op.spec: [None] * n for op in scored if op not in self.batched}

    def counters(self) -> tuple[dict[str, float], float]:
        return dict(self.seconds), self.exact_seconds

    def group_state(self, rows: range, before: tuple[dict[str, float], float]) -> dict:
        """What scoring the documents `rows` added (a checkpoint's unit): `before` is `counters()`
        taken before they were scored."""
        seconds, exact_seconds = before
        return {"per_step": {s: [v[d] for d in rows] for s, v in self.per_step.items()},
                "stats": {s: [v[d] for d in rows] for s, v in self.stats.items()},
                "doc_seconds": {s: [v[d] for d in rows] for s, v in self.doc_seconds.items()},
                "decode_seconds": [self.decode_seconds[d] for d in rows],
                "exact_nll": self.exact_nll[-len(rows):],
                "seconds": {s: self.seconds[s] - seconds[s] for s in self.seconds},
                "exact_seconds": self.exact_seconds - exact_seconds}

    def restore(self, rows: range, state: dict) -> None:
        """Put back a group's `group_state`, as if its documents had just been scored."""
        for field in ("per_step", "stats", "doc_seconds"):
            for spec, values in getattr(self, field).items():
                for d, value in zip(rows, state[field][spec]):
                    values[d] = value
        for d, value in zip(rows, state["decode_seconds"]):
            self.decode_seconds[d] = value
        self.exact_nll += state["exact_nll"]
        for spec, value in state["seconds"].items():
            self.seconds[spec] += value
        self.exact_seconds += state["exact_seconds"]


def _score_or_resume(loaded: Loaded, tally: _Tally, used: list, group: int, prefill: int, decode: int,
                     path: str,
                     bar) -> None:
    """`_score_group`, stored as a checkpoint's unit in `make book` (`kvutils.core.checkpoints`):
    a build interrupted mid-chapter reads the groups it finished back instead of scoring them again."""
    root = checkpoints.folder()
    rows = range(group, min(group + STEP_BATCH, len(used)))
    key = (f"accept-{loaded.name}-{prefill}+{decode}-docs{rows.start}-{rows.stop}-"
           + checkpoints.digest(str(loaded.dtype), path, tally.op_path, [used[d][0].id for d in rows]))
    state = checkpoints.load(root, key) if root else None
    if state is not None:
        tally.restore(rows, state)
        bar.update(len(rows))
        return
    before = tally.counters()
    _score_group(loaded, tally, used, group, prefill, decode, path, bar)
    if root:
        checkpoints.save(root, key, tally.group_state(rows, before))


def _score_group(loaded: Loaded, tally: _Tally, used: list, group: int, prefill: int, decode: int, path: str,
                 bar) -> None:
    """One group of documents: each one's exact prefill and reference, every one-document operation
    scored beside it, then the group's batched operations decoded together."""
    exact_op = Exact()
    references, starts = {}, {op.spec: [] for op in tally.batched}
    for d, (_, ids) in enumerate(used[group:group + STEP_BATCH], start=group):
        t0 = time.perf_counter()
        # shared by every op that starts from it
        prefilled = exact_prefill(loaded, ids[None, :prefill], views=tally.views)
        t1 = time.perf_counter()
        reference = PATHS["fast"](loaded, exact_op, ids, prefill, decode, prefilled)
        tally.exact_seconds += time.perf_counter() - t0
        tally.decode_seconds[d] = time.perf_counter() - t1  # the exact cache's decode pass alone
        targets = ids[prefill + 1:prefill + decode + 1].to(reference.device)
        references[d] = (reference, targets)
        held = Reference(reference, targets)  # the exact side, for this document's one-document operations
        for op in tally.scored:
            t0 = time.perf_counter()
            if op in tally.batched:
                starts[op.spec].append(step_start(loaded, op, ids, prefill, prefilled,
                                                  tally.stats[op.spec][d]))
            else:
                logits = (reference if op == exact_op and path == "fast" else
                          PATHS[tally.op_path[op.spec]](loaded, op, ids, prefill, decode, prefilled,
                                                        stats=tally.stats[op.spec][d]))
                tally.per_step[op.spec][d] = held.compare(logits)
                tally.doc_seconds[op.spec][d] = time.perf_counter() - t0
            tally.seconds[op.spec] += time.perf_counter() - t0
        tally.exact_nll.append(held.nll)
        del prefilled, held
        bar.update()
    # (docs, prefill + decode + 1)
    ids_group = torch.stack([ids for _, ids in used[group:group + STEP_BATCH]])
    for op in tally.batched:
        t0 = time.perf_counter()
        # (docs, decode, vocab)
        logits = score_step_many(loaded, op, ids_group, prefill, decode, starts.pop(op.spec))
        tally.seconds[op.spec] += time.perf_counter() - t0
        for d, doc_logits in enumerate(logits, start=group):
            tally.per_step[op.spec][d] = compare(references[d][0], doc_logits, references[d][1])


def _op_numbers(loaded: Loaded, op, tally: _Tally, used: list, prefill: int) -> dict:
    """One operation's numbers: its summary, per document, bytes held and seconds."""
    steps = tally.per_step[op.spec]
    if op.data_dependent:  # the mean over documents of what it actually held after the prefill
        held = [s["cache_bytes"] if "cache_bytes" in s else kept_bytes(loaded.config, s["held"], loaded.dtype)
                for s in tally.stats[op.spec]]
        stored = sum(held) / len(held)
    else:
        stored = cache_bytes(loaded.config, op, prefill, loaded.dtype)
    per_doc = tally.doc_seconds.get(op.spec)
    return {"op": op.spec, "name": op.name, "family": op.family, "path": tally.op_path[op.spec],
            **_summary(steps),
            "cache_bytes": stored, "seconds": round(tally.seconds[op.spec], 3),
            **({"seconds_per_document": [round(x, 4) for x in per_doc]} if per_doc is not None else {}),
            "per_document": [{"id": doc.id, **_summary([s])} for (doc, _), s in zip(used, steps)]}


def accept(model, op, docs, prefill: int = 256, decode: int = 256, dtype: str = "float32",
           device: str = "cpu", **kwargs) -> dict:
    """One operation: its numbers (mean_kl, top1_agreement_pct, perplexity, per_document, ...)
    beside the run's shared fields (exact_perplexity, documents, model, ...)."""
    run = accept_many(model, [op], docs, prefill, decode, dtype, device, **kwargs)
    (numbers,) = run.pop("ops").values()
    return {**run, **numbers}


# --------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None, parsed=None) -> int:
    """The command: `parsed` is what kvutils.cache.accept_args.parse(argv) returned (the command
    parses before it imports this module), else argv is parsed here."""
    parser, args = parsed or accept_args.parse(argv)
    if args.task == "passkey":  # long-range retrieval (kvutils.cache.accept_retrieval)
        return accept_retrieval.run(parser, args)
    try:
        run = accept_many(args.model, args.ops, args.documents, args.prefill, args.decode, args.dtype,
                          args.device,
                          args.n_docs, args.skip_short, args.path)
        run = decide(run, args.threshold)  # each metric's interval, and each operation's verdict
    except (ValueError, ModelNotAvailable) as err:
        parser.error(str(err))
    except KeyboardInterrupt:
        print("interrupted; nothing written" + (f" ({args.out} is as it was)" if args.out else ""),
              file=sys.stderr)
        return 130
    except MemoryError:  # not an interruption: say what ran out
        print("out of memory: the run needs more than this machine allows; nothing written"
              + (f" ({args.out} is as it was)" if args.out else ""), file=sys.stderr)
        return OUT_OF_MEMORY
    print(table(run))
    if args.out is not None:
        run.update(packages=results.package_versions(), git_commit=results.git_commit(),
                   machine=results.machine())
        try:
            results.write_json_atomic(args.out, run)
        except OSError as err:  # e.g. the folder went away during the run: keep the numbers
            print(json.dumps(results.jsonable(run)))
            parser.exit(1, f"--out: cannot write {args.out} ({err.strerror or err}); the numbers are printed "
                           "above\n")
        except KeyboardInterrupt:
            print(f"interrupted; {args.out} is as it was", file=sys.stderr)
            return 130
        print(f"wrote {args.out}")
    if run["refused"]:  # a script must not believe it measured every operation it asked for
        print(f"{len(run['refused'])} of {len(args.ops)} operations not scored (refused: "
              f"{', '.join(run['refused'])}); exit status {NOT_ALL_SCORED}", file=sys.stderr)
        return NOT_ALL_SCORED
    return 0


def cli(argv: list[str] | None = None, parsed=None) -> int:
    """`python -m kvutils.accept` and `kvutils-accept` (kvutils.accept.cli, which parses first): a
    kill ends the run as Ctrl-C does, with one line, and --out as it was."""
    from kvutils.core.interrupt import signals_as_interrupt

    with signals_as_interrupt():
        return main(argv, parsed)


if __name__ == "__main__":
    sys.exit(cli())
