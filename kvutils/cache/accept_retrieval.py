"""The acceptance test's retrieval task: does a cache operation keep a key hidden far back findable?

    python -m kvutils.accept --task passkey --model smollm2-135m --op snapkv:compression_ratio=0.5 \\
        [--op ...] [--haystack pydoc|filler|PATH] [--context 1024 --context 2048] \\
        [--depths 0.1,0.5,0.9] [--n-prompts 24] [--regime agnostic|aware|both] [--out J.json]

Prompts come from `kvutils.core.haystack` (RULER's magic numbers in real text, the pass key in the
filler; `--needle` overrides), are scored by `kvutils.cache.retrieval` (one exact prefill for every
operation and regime), and the JSON holds, per operation and regime, `per_prompt` records
{depth, context, correct, key_logprob} and the `accuracy`, beside the exact cache's. Every argument
is checked by `kvutils.cache.accept_args` before torch loads, and every prompt is built before the
model loads.
"""
from __future__ import annotations

import argparse
import sys

from kvutils.cache.accept_args import NOT_ALL_SCORED
from kvutils.cache.retrieval import REGIMES, score_retrieval
from kvutils.core import haystack, results
from kvutils.core.interrupt import OUT_OF_MEMORY
from kvutils.models import loading as models
from kvutils.models.registry import ModelNotAvailable


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
    for spec, why in out["refused"].items():
        rows.append(f"{spec:48s} refused: {why}")
    return "\n".join(rows)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The task, from arguments `kvutils.cache.accept_args` checked: build the prompts (the
    tokenizer only), then load the model and score every operation."""
    try:
        prompts = haystack.build_prompts(models.load_tokenizer(args.model), args.haystack, args.contexts, args.depths,
                                         args.n_prompts, args.needle, args.distractors, args.seed, parameter="--haystack")
        for op in args.ops:
            op.check_lengths(prompts[0].question, len(prompts[0].ids) - 1 - prompts[0].question)
        regimes = REGIMES if args.regime == "both" else (args.regime,)
        loaded = models.load(args.model, models.as_dtype(args.dtype), args.device)
        scored = score_retrieval(loaded, args.ops, prompts, regimes)
    except (ValueError, ModelNotAvailable) as err:
        parser.error(str(err))
    except KeyboardInterrupt:
        print("interrupted; nothing written" + (f" ({args.out} is as it was)" if args.out else ""), file=sys.stderr)
        return 130
    except MemoryError:
        print("out of memory: the run needs more than this machine allows; nothing written", file=sys.stderr)
        return OUT_OF_MEMORY
    out = {"task": "passkey", "model": loaded.describe(), "haystack": args.haystack, "needle": args.needle,
           "contexts": args.contexts, "depths": args.depths, "n_prompts": len(prompts), "regimes": list(regimes),
           "prompts": [q.record() for q in prompts], **summarise(scored, regimes)}
    print(table(out))
    if args.out is not None:
        out.update(packages=results.package_versions(), git_commit=results.git_commit(), machine=results.machine())
        results.write_json_atomic(args.out, out)
        print(f"wrote {args.out}")
    if out["refused"]:  # as the score task: a script must not believe every operation was measured
        print(f"{len(out['refused'])} of {len(args.ops)} operations not scored (refused: "
              f"{', '.join(out['refused'])}); exit status {NOT_ALL_SCORED}", file=sys.stderr)
        return NOT_ALL_SCORED
    return 0
