"""`python -m kvutils.accept`'s arguments, parsed and checked without torch.

Importing torch and transformers takes seconds of CPU; a typo should not cost them. `parse(argv)`
checks everything that needs no model and no torch: the flags (a misspelt one named with the
closest), each `--op` (the registry's dataclasses check their fields without torch), the numbers
and their bounds, `--out`, the documents of `--docs` (read, not tokenised) and the model (its
files, config and tokenizer, read without loading weights: kvutils.models.checks). Only then does
the command import kvutils.cache.accept, which scores. A bad input exits with status 2 and one
line naming the flag, as argparse does.

The acceptance test has two tasks, `score` (teacher-forced KL) and `passkey` (long-range retrieval);
another task adds an entry to TASKS: its flags, and the check of its own flags, which runs after
the shared ones.
"""
from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvutils.cache.base import CACHE_OBJECT, CacheOp
from kvutils.cache.registry import OPS, parse_op
from kvutils.core import checks, data, haystack, results
from kvutils.core.near_exact import NEAR_EXACT_PCT

DTYPES = ("float32", "float64")  # kvutils.models.loading.DTYPES, named here without importing torch
PATHS = ("fast", "step")  # kvutils.cache.scoring.PATHS
NOT_ALL_SCORED = 3  # the exit status when a requested operation was refused (its reason is in the output)


@dataclass(frozen=True)
class Task:
    """One thing the command measures: `flags(parser)` adds its own flags; `check(args)` checks
    them (ValueError naming the flag), after the shared flags and the model were checked."""

    name: str
    help: str
    flags: Callable[[argparse.ArgumentParser], None]
    check: Callable[[argparse.Namespace], None]


def _score_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("task score: teacher-forced scoring on the documents of --docs")
    group.add_argument("--docs",
                       help='"pydoc", a folder of .txt files or a .jsonl with a "text" field (required; each '
                       f"document is read only to its first {data.DOC_PREFIX_BYTES:,} bytes)")
    group.add_argument("--prefill", type=int, default=256,
                       help="tokens that fill the cache before the operation (default: %(default)s)")
    group.add_argument("--decode", type=int, default=256,
                       help="teacher-forced tokens scored after it (default: %(default)s)")
    group.add_argument("--n-docs", type=int, default=None,
                       help="use the first N long enough documents (default: all)")
    group.add_argument("--skip-short", action=argparse.BooleanOptionalAction, default=True,
                       help="leave out documents shorter than prefill + decode + 1 tokens, naming them on "
                            "stderr and "
                       "in the JSON (default: on; off, a short document is an error)")
    group.add_argument("--path", default="fast", choices=PATHS,
                       help="fast (one forward) or step (reference) (default: %(default)s)")
    group.add_argument("--threshold", type=float, default=NEAR_EXACT_PCT, metavar="PCT",
                       help="the near-exact line: top-1 agreement (%%) each operation is tested against, per "
                            "document: "
                       "near-exact when its 95 %% interval lies wholly above (and a sign test agrees), "
                       "costly when wholly below, else not separated at that n (default: the book's line, "
                       "%(default)g)")


def _check_score(args: argparse.Namespace) -> None:
    if args.docs is None:
        raise ValueError(
            '--docs is required: "pydoc", a folder of .txt files or a .jsonl with a "text" field')
    checks.check_count("--prefill", args.prefill)
    checks.check_count("--decode", args.decode)
    if not (isinstance(args.threshold, float) and 0 < args.threshold <= 100):  # nan and inf fail too
        raise ValueError(f"--threshold: a top-1 agreement in %, 0 < PCT ≤ 100 (the book's near-exact line is "
                         f"{NEAR_EXACT_PCT:g}), got {args.threshold:g}")
    if args.n_docs is not None:
        checks.check_int("--n-docs", args.n_docs, 1, checks.MAX_ITEMS, checks.ITEMS_WHY)
    for op in args.ops:
        op.check_lengths(args.prefill, args.decode)
    args.documents = data.load_corpus(args.docs, parameter="--docs")  # read here, tokenised after torch loads
    if args.n_docs is not None and args.n_docs > len(args.documents):
        raise ValueError(f"--n-docs: {args.n_docs} asked for, but --docs {args.docs} holds "
                         f"{len(args.documents)} documents")
    context = args.resolved.context
    if args.prefill + args.decode + 1 > context:
        raise ValueError(f"--prefill + --decode + 1 = {args.prefill + args.decode + 1:,} exceeds "
                         f"{args.model}'s context of {context:,} positions")


def _passkey_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("task passkey: long-range retrieval of keys hidden in a haystack "
                                      "(kvutils.cache.accept_retrieval)")
    group.add_argument("--haystack", default="pydoc",
                       help='"filler" (the pass key test\'s repeated sentences), "pydoc", '
                       'a folder of .txt files or a .jsonl with a "text" field (default: %(default)s)')
    group.add_argument("--needle", default="auto", choices=["auto", *haystack.NEEDLES],
                       help="passkey (5 digits) or magic (RULER's magic number, 7 digits); auto: passkey in "
                            "the filler, "
                       "magic in real text (default: %(default)s)")
    group.add_argument("--context", dest="contexts", action="append", type=int,
                       help="prompt length in tokens; repeat for several (default: 1024)")
    group.add_argument("--depths", default="0.1,0.5,0.9",
                       help="needle depths, shares of the haystack in (0, 1) (default: %(default)s)")
    group.add_argument("--n-prompts", type=int, default=24,
                       help="prompts per context, depths in turn (default: %(default)s)")
    group.add_argument("--distractors", type=int, default=0,
                       help="other magic numbers beside the asked one (RULER's "
                       "multi-key shape; default: %(default)s)")
    group.add_argument("--regime", default="both", choices=["agnostic", "aware", "both"],
                       help="agnostic: compressed before the question arrives (prompt caching); aware: the "
                            "question "
                       "is in the compressed prefill (SnapKV's setting) (default: %(default)s)")
    group.add_argument("--seed", type=int, default=0, help="keys, words and documents (default: %(default)s)")
    group.add_argument("--turns", type=int, default=1,
                       help="questions per haystack: each haystack carries that many needles of different "
                            "shapes "
                       "(RULER's magic number, a door code, a phone number; at the depths, rotated), the "
                       "cache is compressed once and each needle is asked in turn, turn 1's question and "
                       "answer extending the cache (follow-up questions; at most the number of depths, and "
                       "3; default: %(default)s)")


def _check_passkey(args: argparse.Namespace) -> None:
    args.contexts = [checks.check_int("--context", c, haystack.MIN_CONTEXT, haystack.MAX_CONTEXT,
                                      "a prompt needs room for its haystack, and no model here holds more")
                     for c in (args.contexts or [1024])]
    checks.no_repeats("--context", args.contexts)
    if max(args.contexts) > args.resolved.context:
        raise ValueError(f"--context: {max(args.contexts):,} is longer than {args.model} handles "
                         f"({args.resolved.context:,} positions)")
    args.depths = haystack.check_depths(args.depths, "--depths")
    checks.check_int("--n-prompts", args.n_prompts, 1, checks.MAX_ITEMS, checks.ITEMS_WHY)
    checks.check_int("--distractors", args.distractors, 0, len(haystack.WORDS) - 1,
                     f"each distractor takes another of the {len(haystack.WORDS)} words")
    checks.check_int("--seed", args.seed, 0, 2**63 - 1, "a seed is a 64-bit integer")
    args.needle = haystack.default_needle(args.haystack) if args.needle == "auto" else args.needle
    if args.needle == "passkey" and args.distractors:
        raise ValueError("--distractors: the pass key has one needle; distractors are for --needle magic")
    checks.check_int("--turns", args.turns, 1, min(len(args.depths), len(haystack.SHAPES)),
                     f"each turn asks about a needle at another of --depths, each of another of the "
                     f"{len(haystack.SHAPES)} needle shapes")
    if args.needle == "passkey" and args.turns > 1:
        raise ValueError("--turns: the pass key has one needle, so one question; follow-ups need --needle "
                         "magic (the default in real text)")
    if args.haystack != "filler":
        # exists and reads; tokenised after torch loads
        data.load_corpus(args.haystack, parameter="--haystack")


TASKS: dict[str, Task] = {
    "score": Task("score", "KL, top-1 agreement and perplexity of each operation against the exact cache",
                  _score_flags, _check_score),
    "passkey": Task("passkey",
                    "long-range retrieval: keys hidden at depths of a long haystack, found or not under "
                    "each operation, with the question after or inside the compressed prefill",
                    _passkey_flags, _check_passkey),
}


def task_flags(task: Task) -> dict[str, str]:
    """{dest: flag} of the flags a task adds."""
    own = argparse.ArgumentParser(add_help=False)
    task.flags(own)
    return {action.dest: action.option_strings[0] for action in own._actions}


def _check_task_flags(argv: list[str] | None, task: str) -> None:
    """A flag of another task is an error naming the task it belongs to: it would be ignored (the
    `score` documents given to `passkey`, a haystack given to `score`). Read from a second parse in
    which no flag has a default, so a flag given at its default value counts too."""
    others = {dest: (flag, name) for name, t in TASKS.items() if name != task for dest,
              flag in task_flags(t).items()}
    probe = parser()
    for action in probe._actions:
        if action.dest in others:
            action.default = argparse.SUPPRESS  # absent from the namespace unless given
    given = [others[dest] for dest in vars(probe.parse_args(argv)) if dest in others]
    if given:
        flags = ", ".join(flag for flag, _ in given)
        raise ValueError(f"{flags}: a flag of --task {given[0][1]}, not of --task {task} (which would ignore "
                         f"it); drop it, or run --task {given[0][1]}")


def _check_not_all_refused(args: argparse.Namespace) -> None:
    """An operation that a transformers cache refuses for this model is known from its config: when
    every operation asked for is refused, stop now rather than after the model loads and the exact
    cache runs (with some refused, the run scores the others and names the refused in its output)."""
    from kvutils.cache.methods.hf_quantized import refusal
    from kvutils.models.configs import config_file

    config = config_file(args.model,
                         args.resolved) if all(op.kind == CACHE_OBJECT for op in args.ops) else None
    if config is None:  # some operation is not a cache object, or a tiny model (checked once it is built)
        return
    reasons = {op.spec: refusal(config, op) for op in args.ops}
    if all(reasons.values()):
        raise ValueError("--op: every operation asked for is refused for " + args.model + ": "
                         + "; ".join(f"{spec}: {why}" for spec, why in reasons.items()))


def _op_arg(spec: str) -> CacheOp:
    try:
        return parse_op(spec)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


# a sentence ends at a period, then a capital; not the period of "et al." or "e.g."
_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)(?<!\bvs)\.\s+(?=[A-Z0-9`(\"])")


def summary(cls) -> str:
    """An operation's one-line summary: the first sentence of its docstring, whole."""
    text = " ".join((cls.__doc__ or cls.name).split())
    return _SENTENCE_END.split(text, maxsplit=1)[0].rstrip(".") + "."


def registry_text() -> str:
    lines = []
    for name, cls in OPS.items():
        fields = ", ".join(f"{f.name}={f.default}" for f in dataclasses.fields(cls))
        lines.append(f"  {name}{f' ({fields})' if fields else ''}: {summary(cls)}")
    return "\n".join(lines)


EXAMPLES = """

examples:
  # two quantisations against the exact cache on 8 documents of the default corpus, each with a verdict
  # against the book's near-exact line (99 % top-1 agreement; --threshold PCT for another)
  python -m kvutils.accept --model smollm2-135m --docs pydoc --n-docs 8 \\
      --op quantize_naive:bits=4 --op quantize_kivi:bits=4
  # your own model (a local directory) and text (a folder of .txt files), numbers kept as JSON
  python -m kvutils.accept --model ./my-model --docs ./my-texts \\
      --op snapkv:compression_ratio=0.5 --out snap.json
  # does a pressed cache still find a key hidden 1,024 tokens back? (n, intervals and a verdict against exact)
  python -m kvutils.accept --task passkey --model smollm2-135m --haystack pydoc --context 1024 \\
      --op knorm:compression_ratio=0.5"""


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kvutils.accept", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Measure KV-cache operations against the exact cache: mean KL, top-1 agreement, "
                    "perplexity.",
        epilog="operations (--op name or name:key=value,...):\n" + registry_text() + EXAMPLES)
    parser.add_argument("--task", default="score", choices=list(TASKS),
                        help="what to measure: " + "; ".join(f"{t.name}: {t.help}" for t in TASKS.values())
                        + " (default: %(default)s)")
    parser.add_argument("--model", required=True, type=str.strip,  # " tiny-llama " as the notebooks take it
                        help="registry name, Hugging Face id or local model directory (required)")
    parser.add_argument("--op", dest="ops", action="append", type=_op_arg, required=True,
                        help="a cache operation; repeat to score several on one model load (required; "
                        "an operation this machine cannot run is refused here, before the model loads)")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="(default: %(default)s)")
    parser.add_argument("--device", default="cpu",
                        help="cpu, cuda, cuda:1, mps, or auto: accelerate's device_map=\"auto\" "
                        "spreads the model over every accelerator, then the CPU (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write the numbers here as JSON (default: none, "
                        "printed only)")
    for task in TASKS.values():
        task.flags(parser)
    return parser


def parse(argv: list[str] | None = None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    """The parser and the checked arguments: `args.ops` the operations, `args.documents` the
    documents read from --docs, `args.resolved` the model (kvutils.models.registry.Resolved),
    `args.out` the file it names. A bad input ends the process with status 2 and one line."""
    from kvutils.models.checks import resolve
    from kvutils.models.registry import ModelNotAvailable

    the_parser = parser()
    checks.check_flags(the_parser, argv)
    args = the_parser.parse_args(argv)
    try:
        if len({op.spec for op in args.ops}) != len(args.ops):
            raise ValueError(f"--op: an operation is given twice in {[op.spec for op in args.ops]}")
        checks.check_device(args.device)
        if args.out is not None:  # before any model loads, not after the run
            args.out = results.check_output_file(args.out, "--out")  # "~/a.json" as the file it names
        args.resolved = resolve(args.model, parameter="--model")
        if args.resolved.family != "causal":
            raise ValueError(f"--model: {args.model} is an {args.resolved.family} model; the cache test "
                             "needs a causal one")
        _check_task_flags(argv, args.task)
        TASKS[args.task].check(args)
        _check_not_all_refused(args)
    except (ValueError, ModelNotAvailable) as err:
        the_parser.error(str(err))
    return the_parser, args
