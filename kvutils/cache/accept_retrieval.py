"""The acceptance test's retrieval task: does a cache operation keep a key hidden far back findable?

    python -m kvutils.accept --task passkey --model smollm2-135m --op snapkv:compression_ratio=0.5 \\
        [--op ...] [--haystack pydoc|filler|PATH] [--context 1024 --context 2048] \\
        [--depths 0.1,0.5,0.9] [--n-prompts 24] [--regime agnostic|aware|both] [--out J.json]

Prompts come from `kvutils.core.haystack` (RULER's magic numbers in real text, the pass key in the
filler; `--needle` overrides), are scored by `kvutils.cache.retrieval` (one exact prefill for every
operation and regime), and the JSON holds, per operation and regime, `per_prompt` records
{depth, context, correct, key_logprob} and the `accuracy`, beside the exact cache's. Every argument
is checked, and every prompt built, before the model loads.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvutils.cache.registry import parse_ops
from kvutils.cache.retrieval import REGIME_MEANING, REGIMES, score_retrieval
from kvutils.core import checks, haystack, results
from kvutils.core.interrupt import OUT_OF_MEMORY
from kvutils.models import loading as models
from kvutils.models.checks import resolve
from kvutils.models.registry import ModelNotAvailable


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m kvutils.accept --task passkey", description="Long-range retrieval under KV-cache operations: "
        "keys hidden at depths of a long haystack, asked for at the end; accuracy (greedy exact match) and the key's "
        "log-probability per operation and regime, against the exact cache.")
    p.add_argument("--task", choices=["passkey"], required=True)
    p.add_argument("--model", required=True, type=str.strip, help="registry name, Hugging Face id or local directory")
    p.add_argument("--op", dest="ops", action="append", required=True, help="a cache operation; repeat for several")
    p.add_argument("--haystack", default="pydoc", help='"filler" (the pass key test\'s repeated sentences), "pydoc", a '
                   'folder of .txt files or a .jsonl with a "text" field (default: %(default)s)')
    p.add_argument("--needle", default="auto", choices=["auto", *haystack.NEEDLES],
                   help="passkey (5 digits) or magic (RULER's magic number, 7 digits); auto: passkey in the filler, "
                   "magic in real text (default: %(default)s)")
    p.add_argument("--context", dest="contexts", action="append", type=int,
                   help="prompt length in tokens; repeat for several (default: 1024)")
    p.add_argument("--depths", default="0.1,0.5,0.9", help="needle depths, shares of the haystack in (0, 1) "
                   "(default: %(default)s)")
    p.add_argument("--n-prompts", type=int, default=24, help="prompts per context, depths in turn (default: %(default)s)")
    p.add_argument("--distractors", type=int, default=0, help="other magic numbers hidden beside the asked one "
                   "(RULER's multi-key shape; default: %(default)s)")
    p.add_argument("--regime", default="both", choices=[*REGIMES, "both"],
                   help="; ".join(f"{r}: {m}" for r, m in REGIME_MEANING.items()) + " (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="keys, words and documents (default: %(default)s)")
    p.add_argument("--dtype", default="float32", choices=list(models.DTYPES), help="(default: %(default)s)")
    p.add_argument("--device", default="cpu", help="(default: %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="write the numbers here as JSON (default: printed only)")
    return p


def summarise(run: dict, regimes: tuple[str, ...]) -> dict:
    """Per operation and regime: per_prompt records and accuracy; the exact cache's beside them."""
    def acc(records):
        return sum(r["correct"] for r in records) / len(records)
    return {"exact": {"per_prompt": run["exact"], "accuracy": acc(run["exact"])},
            "ops": {spec: {r: {"per_prompt": v[r]["per_prompt"], "accuracy": acc(v[r]["per_prompt"]),
                               "held_bytes": v[r]["held_bytes"]} for r in regimes}
                    for spec, v in run["ops"].items()},
            "refused": run["refused"], "seconds": run["seconds"]}


def table(out: dict) -> str:
    rows = [f"{out['model']['name']}: {out['n_prompts']} prompts, contexts {out['contexts']}, haystack {out['haystack']} "
            f"({out['needle']}); exact cache {100 * out['exact']['accuracy']:.1f} %",
            f"{'operation':48s} " + " ".join(f"{r:>9s}" for r in out["regimes"])]
    for spec, v in out["ops"].items():
        rows.append(f"{spec:48s} " + " ".join(f"{100 * v[r]['accuracy']:8.1f}%" for r in out["regimes"]))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    checks.check_flags(p, argv)
    args = p.parse_args(argv)
    try:
        ops = parse_ops(args.ops)
        contexts = [checks.check_int("--context", c, haystack.MIN_CONTEXT, haystack.MAX_CONTEXT)
                    for c in (args.contexts or [1024])]
        checks.no_repeats("--context", contexts)
        depths = haystack.check_depths(args.depths, "--depths")
        checks.check_int("--n-prompts", args.n_prompts, 1, 10_000)
        checks.check_int("--seed", args.seed, 0, 2**63 - 1)
        checks.check_device(args.device)
        if args.out is not None:
            args.out = results.check_output_file(args.out, "--out")
        resolved = resolve(args.model, parameter="--model")
        if resolved.family != "causal":
            raise ValueError(f"--model: {args.model} is an {resolved.family} model; the retrieval test needs a causal one")
        if max(contexts) > resolved.context:
            raise ValueError(f"--context: {max(contexts)} is longer than {args.model} handles ({resolved.context} tokens)")
        tokenizer = models.load_tokenizer(args.model)
        needle = None if args.needle == "auto" else args.needle
        prompts = haystack.build_prompts(tokenizer, args.haystack, contexts, depths, args.n_prompts, needle,
                                         args.distractors, args.seed, parameter="--haystack")
        for op in ops:
            for prompt in prompts[:1]:
                op.check_lengths(prompt.question, len(prompt.ids) - 1 - prompt.question)
        regimes = REGIMES if args.regime == "both" else (args.regime,)
        loaded = models.load(args.model, models.as_dtype(args.dtype), args.device)
        run = score_retrieval(loaded, ops, prompts, regimes)
    except (ValueError, ModelNotAvailable) as err:
        p.error(str(err))
    except KeyboardInterrupt:
        print("interrupted; nothing written" + (f" ({args.out} is as it was)" if args.out else ""), file=sys.stderr)
        return 130
    except MemoryError:
        print("out of memory: the run needs more than this machine allows; nothing written", file=sys.stderr)
        return OUT_OF_MEMORY
    out = {"task": "passkey", "model": loaded.describe(),
           "haystack": args.haystack, "needle": needle or haystack.default_needle(args.haystack),
           "contexts": contexts, "depths": depths, "n_prompts": len(prompts), "regimes": list(regimes),
           "prompts": [q.record() for q in prompts], **summarise(run, regimes)}
    print(table(out))
    if args.out is not None:
        out.update(packages=results.package_versions(), git_commit=results.git_commit(), machine=results.machine())
        results.write_json_atomic(args.out, out)
        print(f"wrote {args.out}")
    return 0
