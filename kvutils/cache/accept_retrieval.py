"""The acceptance test's retrieval task: does a cache operation keep a key hidden far back findable?

    python -m kvutils.accept --task passkey --model smollm2-135m --op snapkv:compression_ratio=0.5 \\
        [--op ...] [--haystack pydoc|filler|PATH] [--context 1024 --context 2048] \\
        [--depths 0.1,0.5,0.9] [--n-prompts 24] [--regime agnostic|aware|both] [--turns 3] [--out J.json]

Prompts come from `kvutils.core.haystack` (RULER's magic numbers in real text, the pass key in the
filler; `--needle` overrides), are scored by `kvutils.cache.retrieval` (one exact prefill for every
operation and regime), and the JSON holds, per operation and regime, `per_prompt` records
{depth, context, correct, key_logprob}, n, the keys found and the `accuracy` with its Clopper-Pearson
interval, and a verdict against the exact cache on the same prompts (McNemar's exact test, through
kvutils.core.compare), beside the exact cache's. A rough run time is printed first. Every argument
is checked by `kvutils.cache.accept_args` before torch loads, and every prompt is built before the
model loads. With `--turns N`, each haystack carries N needles and the cache, compressed once, answers
each in turn: "followups" holds, per operation and regime, the later turns' keys found, their share
paired over prompts against turn 1 on the same cache and against the exact cache's follow-ups.
"""
from __future__ import annotations

import argparse
import sys
import time

from kvutils.cache.accept_args import NOT_ALL_SCORED
from kvutils.cache.retrieval import REGIME_MEANING, REGIMES, STEP_FOLLOWUPS, score_retrieval
from kvutils.core import compare, haystack, results
from kvutils.core.interrupt import OUT_OF_MEMORY
from kvutils.models import loading as models
from kvutils.models.registry import ModelNotAvailable

# A rough cost per prompt, for the estimate printed before the model loads: measured in the book's full build
# (tests/data/full_build/04_retrieval.json.gz; smollm2-135m and gemma3-270m on one CPU core, 1,024 and 2,048
# tokens): the shared exact prefill took 2 to 3 s per 1,024 prompt tokens, an operation 0.1 to 0.7 s per
# regime (expected attention 1.5 s). Rounded up. On a shared, busy machine it is several times slower:
# smollm2-135m, 6 prompts of 1,024 tokens, snapkv in both regimes took 136 s at a load average of 8 on 2 cores
# (24 s at these rates).
EXACT_SECONDS_PER_1K = 3.0  # the exact prefill and answer of one prompt, per 1,024 tokens
OP_SECONDS_PER_1K = 0.5  # one operation in one regime, per 1,024 tokens
BUSY_FACTOR = 6  # the slow end of the estimate: a machine shared with other work (136 s / 24 s, rounded)
UNITS = {"accuracy": "share of prompts whose key is found (0 to 1)",
         "accuracy_ci95": "Clopper-Pearson 95 % interval "
         "of that share",
         "vs_exact": "difference in that share (op − exact), paired over prompts, McNemar's exact test",
         "held_bytes": "bytes the cache holds after the compressed prefill, per prompt", "seconds": "seconds"}


def estimate_seconds(contexts: list[int], n_prompts: int, n_ops: int, n_regimes: int) -> float:
    """A rough run time (seconds) on an idle core: every prompt's exact prefill, and each operation
    in each regime, at the per-1,024-token costs above."""
    per_1k = EXACT_SECONDS_PER_1K + OP_SECONDS_PER_1K * n_ops * n_regimes
    return per_1k * n_prompts * sum(contexts) / 1024


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def estimate_line(args: argparse.Namespace, regimes: tuple[str, ...]) -> str:
    """What the run will roughly take, said as an estimate, before anything loads."""
    seconds = estimate_seconds(args.contexts, args.n_prompts, len(args.ops), len(regimes))
    n = args.n_prompts * len(args.contexts)
    return (f"estimate: {_minutes(seconds)} to {_minutes(BUSY_FACTOR * seconds)} (idle to busy machine) for "
            f"{n} prompts × (the exact cache + {len(args.ops)} operation(s) × {len(regimes)} regime(s)), a "
            f"135-270 M-parameter model on one CPU core at {EXACT_SECONDS_PER_1K:g} s per 1,024-token prompt "
            f"and {OP_SECONDS_PER_1K:g} s per operation and regime; a rough guess: larger models take "
            "longer, tiny test models far less")


def _found(records: list[dict]) -> list[bool]:
    return [bool(r["correct"]) for r in records]


def against_exact(spec: str, regime: str, op_right: list[bool], exact_right: list[bool]) -> dict:
    """One operation in one regime against the exact cache on the same prompts: n, keys found, the
    Clopper-Pearson interval, the paired difference (compare.paired_binary: McNemar's exact test
    over the discordant prompts, a bootstrap interval) and the verdict with its line."""
    n, found = len(op_right), sum(op_right)
    test = compare.paired_binary(op_right, exact_right, f"{spec} ({regime})", "exact", unit="prompts")
    lost = sum(e and not o for o, e in zip(op_right, exact_right))
    gained = sum(o and not e for o, e in zip(op_right, exact_right))
    if test.verdict == compare.IDENTICAL:
        verdict = "same as exact"
    elif test.verdict == compare.A_LOWER:
        verdict = "loses keys"
    elif test.verdict == compare.A_HIGHER:
        verdict = "finds more keys than exact"
    else:
        verdict = f"not separated at n = {n}"
    diff = f"{100 * test.effect:+.1f} pp"
    if test.ci95 is not None:
        diff += f" [{100 * test.ci95[0]:+.1f}, {100 * test.ci95[1]:+.1f}]"
    why = f"; {test.withheld()}" if test.withheld() else ""
    if not any(exact_right):
        why += ("; the exact cache finds no key here, so this test cannot show a loss (a longer context or a "
                "larger model)")
    line = (f"{spec}, {regime}: {verdict}: {found} of {n} keys found against the exact cache's "
            f"{sum(exact_right)}; difference {diff} (95 % interval), {lost} lost and {gained} gained, "
            f"McNemar exact p = {test.p:.2g}{why}")
    return {"n": n, "found": found, "accuracy": found / n,
            "accuracy_ci95": list(compare.proportion_interval(found, n)),
            "vs_exact": test.to_dict(), "mcnemar": {"lost": lost, "gained": gained, "p": test.p},
            "verdict": verdict, "line": line}


def followup_summary(spec: str, regime: str, per_prompt: list[list[dict]], turn1: list[bool],
                     exact: list[list[dict]]) -> dict:
    """One operation's follow-ups in one regime: keys found of n, the per-prompt share right paired
    over prompts (compare.paired: the bootstrap interval and the exact sign test, McNemar's test on
    right/wrong) against its own turn 1 on the same cache and against the exact cache's follow-ups."""
    share = [sum(r["correct"] for r in rs) / len(rs) for rs in per_prompt]
    exact_share = [sum(r["correct"] for r in rs) / len(rs) for rs in exact]
    n, found = sum(map(len, per_prompt)), sum(r["correct"] for rs in per_prompt for r in rs)
    vs_turn1 = compare.paired(share, [float(x) for x in turn1], f"{spec} ({regime}) follow-ups", "turn 1",
                              "prompts")
    vs_exact = compare.paired(share, exact_share, f"{spec} ({regime}) follow-ups", "exact follow-ups",
                              "prompts")
    return {"per_prompt": per_prompt, "n": n, "found": found, "accuracy": found / n,
            "accuracy_ci95": list(compare.proportion_interval(found, n)), "vs_turn1": vs_turn1.to_dict(),
            "vs_exact": vs_exact.to_dict(),
            "line": f"{spec}, {regime}: follow-ups {found} of {n} keys found; "
                    f"{vs_turn1.sentence(lower_is_better=False)}; {vs_exact.sentence(lower_is_better=False)}"}


def summarise(run: dict, regimes: tuple[str, ...]) -> dict:
    """Per operation and regime: per_prompt records, n, keys found, accuracy with its interval, held
    bytes and the paired verdict against the exact cache; the exact cache's n, accuracy and interval."""
    exact = _found(run["exact"])
    n = len(exact)
    ops = {spec: {r: {"per_prompt": v[r]["per_prompt"], "held_bytes": v[r]["held_bytes"],
                      **against_exact(spec, r, _found(v[r]["per_prompt"]), exact)} for r in regimes}
           for spec, v in run["ops"].items()}
    return {"exact": {"per_prompt": run["exact"], "n": n, "found": sum(exact), "accuracy": sum(exact) / n,
                      "accuracy_ci95": list(compare.proportion_interval(sum(exact), n))},
            "ops": ops, "refused": run["refused"], "seconds": run["seconds"],
            "exact_seconds": run["exact_seconds"],
            "regime_meaning": {r: REGIME_MEANING[r] for r in regimes}, "units": UNITS,
            **_followups(run, regimes)}


def _followups(run: dict, regimes: tuple[str, ...]) -> dict:
    """{"followups": ...} where the prompts have follow-up turns (`--turns`), else {}."""
    exact = run["exact_followups"]
    if not any(exact):
        return {}
    found = sum(r["correct"] for rs in exact for r in rs)
    n = sum(map(len, exact))
    out = {"exact": {"per_prompt": exact, "n": n, "found": found, "accuracy": found / n,
                     "accuracy_ci95": list(compare.proportion_interval(found, n))}, "ops": {}}
    for spec, v in run["ops"].items():
        for r in regimes:
            if any(v[r]["followups"]):  # the step path scores turn 1 alone (retrieval.STEP_FOLLOWUPS)
                out["ops"].setdefault(spec, {})[r] = followup_summary(spec, r, v[r]["followups"],
                                                                      _found(v[r]["per_prompt"]), exact)
            else:
                out["ops"].setdefault(spec, {})[r] = {"not_scored": STEP_FOLLOWUPS}
    return {"followups": out}


def _pct(x: dict) -> tuple[str, str]:
    lo, hi = x["accuracy_ci95"]
    return f"{x['found']} of {x['n']}", f"{100 * x['accuracy']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def table(out: dict) -> str:
    """The printed result: what was asked, what the regimes mean, a row per operation and regime
    (keys found of n, accuracy with its Clopper-Pearson interval, the difference from exact with
    McNemar's counts, the cache held, the verdict), then one verdict line each."""
    exact = out["exact"]
    rows = [f"{out['model']['name']}: n = {exact['n']} prompts ({out['n_prompts_per_context']} per context "
            f"at {', '.join(map(str, out['contexts']))} tokens, needle depths {out['depths']}), haystack "
            f"{out['haystack']} ({out['needle']} needle)",
            *(f"  {r}: the cache {meaning}" for r, meaning in out["regime_meaning"].items())]
    cells = [("operation", "regime", "keys found", "accuracy, % [95 % CI]", "− exact, pp",
              "lost/gained, prompts",
              "McNemar p", "held, KiB (mean)", "verdict"),
             ("exact (the reference)", "", *_pct(exact), "", "", "", "", "")]
    for spec, v in out["ops"].items():
        for regime in out["regimes"]:
            x = v[regime]
            held = [b for b in x["held_bytes"] if b is not None]
            cells.append((spec, regime, *_pct(x), f"{100 * x['vs_exact']['effect']:+.1f}",
                          f"{x['mcnemar']['lost']}/{x['mcnemar']['gained']}", f"{x['mcnemar']['p']:.2g}",
                          f"{sum(held) / len(held) / 1024:.1f}" if held else "", x["verdict"]))
    widths = [max(len(c[i]) for c in cells) for i in range(len(cells[0]))]
    lines = [" ".join(f"{c:{w}s}" if i < 2 or i == 8 else f"{c:>{w}s}" for i,
                      (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    rows += [lines[0], "-" * len(lines[0]), *lines[1:]]
    rows += [f"{spec} refused: {why}" for spec, why in out["refused"].items()]
    if out["ops"]:
        rows.append("against the exact cache, paired over the same prompts (McNemar's exact test on the "
                    "prompts one finds and the other misses; 95 % intervals: Clopper-Pearson for accuracy, "
                    "bootstrap for the difference):")
        rows += [f"  {v[r]['line']}" for v in out["ops"].values() for r in out["regimes"]]
    if "followups" in out:
        f = out["followups"]
        rows.append(f"follow-up questions (turns 2 to {out['turns']}, through the same compressed cache; the "
                    f"exact cache finds {f['exact']['found']} of {f['exact']['n']}), the share right per "
                    "prompt paired over prompts:")
        rows += [f"  {x.get('line') or spec + ', ' + r + ': follow-ups ' + x['not_scored']}"
                 for spec, v in f["ops"].items() for r, x in v.items()]
    return "\n".join(rows)


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """The task, from arguments `kvutils.cache.accept_args` checked: build the prompts (the
    tokenizer only), then load the model and score every operation."""
    regimes = REGIMES if args.regime == "both" else (args.regime,)
    print(estimate_line(args, regimes), file=sys.stderr, flush=True)
    started = time.time()
    try:
        prompts = haystack.build_prompts(models.load_tokenizer(args.model), args.haystack, args.contexts,
                                         args.depths,
                                         args.n_prompts, args.needle, args.distractors, args.seed,
                                         parameter="--haystack",
                                         turns=args.turns)
        for op in args.ops:
            op.check_lengths(prompts[0].question, len(prompts[0].chain) - 1 - prompts[0].question)
        loaded = models.load(args.model, models.as_dtype(args.dtype), args.device)
        scored = score_retrieval(loaded, args.ops, prompts, regimes)
    except (ValueError, ModelNotAvailable) as err:
        parser.error(str(err))
    except KeyboardInterrupt:
        print("interrupted; nothing written" + (f" ({args.out} is as it was)" if args.out else ""),
              file=sys.stderr)
        return 130
    except MemoryError:
        print("out of memory: the run needs more than this machine allows; nothing written", file=sys.stderr)
        return OUT_OF_MEMORY
    out = {"task": "passkey", "model": loaded.describe(), "haystack": args.haystack, "needle": args.needle,
           "contexts": args.contexts, "depths": args.depths, "n_prompts": len(prompts),
           "n_prompts_per_context": args.n_prompts, "regimes": list(regimes), "turns": args.turns,
           "prompts": [q.record() for q in prompts], **summarise(scored, regimes),
           "seconds_total": round(time.time() - started, 2)}
    print(table(out))
    print(f"took {out['seconds_total']:.0f} s ({out['seconds_total'] / len(prompts):.1f} s per prompt, model "
          "load included)", file=sys.stderr)
    if args.out is not None:
        out.update(packages=results.package_versions(), git_commit=results.git_commit(),
                   machine=results.machine())
        results.write_json_atomic(args.out, out)
        print(f"wrote {args.out}")
    if out["refused"]:  # as the score task: a script must not believe every operation was measured
        print(f"{len(out['refused'])} of {len(args.ops)} operations not scored (refused: "
              f"{', '.join(out['refused'])}); exit status {NOT_ALL_SCORED}", file=sys.stderr)
        return NOT_ALL_SCORED
    return 0
