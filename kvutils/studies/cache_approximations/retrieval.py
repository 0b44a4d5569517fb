"""Chapter 4's long-range retrieval: every method judged on whether the model still finds a key far
back, beside the KL frontier, and whether the KL ranking predicts the retrieval ranking.

Per model and haystack (`kvutils.core.haystack`): prompts at every context and depth; each method at
the frontier's press levels, scored in both regimes (`kvutils.cache.retrieval`). The fixed-budget
methods (a StreamingLLM window) are matched to each press level at each context, so one method
label ("window@0.5") stands for a spec per context. Gate: where the exact cache itself answers
fewer than `GATE` of a context's prompts, the model cannot do the task at that length, and no
verdict is drawn there.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from scipy import stats as scistats

from kvutils.cache import registry
from kvutils.cache.base import POLICY, PRESS
from kvutils.cache.methods.exact import Exact
from kvutils.cache.methods.quantize_kivi import QuantizeKivi
from kvutils.cache.methods.window import Window
from kvutils.cache.registry import parse_op
from kvutils.cache.retrieval import REGIMES, lost_by_construction, prefill_length, score_retrieval
from kvutils.cache.sizes import cache_bytes
from kvutils.core import checkpoints, compare
from kvutils.core.haystack import Prompt
from kvutils.models.layers import kv_shape
from kvutils.studies.cache_approximations import followups, frontier

GATE = 0.8  # the exact cache's accuracy a (model, haystack, context) needs before methods are judged there
# the precision rows (fixed specs), the presses swept at the press levels (kvpress's compression_ratio) and
# the decode-time policies at the budget matching each level (as the window), each as its class states in
# `retrieval` (the registry's `retrieval_fixed()`, `retrieval_swept(kind)`). What `make book` can afford (a
# one-forward press costs about 0.6 s per prompt and level here, both regimes; expected_attention 2 s, tova's
# step path 3.5 s): every press, tova, and the precision rows people deploy; h2o is left to
# `python -m kvutils.accept --task passkey` (kvutils/cache/methods/h2o.py says why)
LEVELS = (0.25, 0.5)

# random eviction again with other seeds, folded into random@<level>'s "seeds" (`fold_seeds`): its
# accuracy as a mean over seeds with their range; the first seed's records stay the method's own
RANDOM_SEEDS = (0, 1)
SEED_LABEL = "random-seed"  # "random-seed1@0.25": an extra seed's label until it is folded
# SnapKV again with its observation window cut to the question's own tokens (its default, 64, is mostly
# haystack when the question is 10-25 tokens long): the test of whether the window explains its misses
QUESTION_WINDOW = "snapkv-question"
QUESTION_WINDOW_LEVELS = (0.25,)
BOOTSTRAP = 2000  # resamples of the rank agreement's interval
SEED = 0


def precision() -> tuple[str, ...]:
    """The precision rows, scored at fixed settings (each class's `retrieval`), in the registry's place
    order."""
    return registry.retrieval_fixed()


def presses() -> tuple[str, ...]:
    """The presses swept over LEVELS (their classes' `retrieval` is `AT_LEVELS`)."""
    return registry.retrieval_swept(PRESS)


def policies() -> tuple[str, ...]:
    """The decode-time policies, each at the budget matching every level."""
    return registry.retrieval_swept(POLICY)


def method_specs(prompt: Prompt, config=None, levels=LEVELS, seeds=RANDOM_SEEDS) -> dict[str, str]:
    """label -> spec for one context: the precision rows, each press at each level (random once per
    seed), each decode-time policy and a StreamingLLM window (4 sinks) holding, on average over the
    agnostic decode, what a press holds, and at QUESTION_WINDOW_LEVELS SnapKV observing the
    question's tokens only (QUESTION_WINDOW).
    KIVI's channel group is cut to the head dimension where that is smaller (the tiny test models)."""
    P = prefill_length(prompt, "agnostic")
    D = len(prompt.ids) - 1 - P
    head_dim = kv_shape(config)[1] if config is not None else None
    out = {}
    for spec in precision():
        op = parse_op(spec)
        if isinstance(op, QuantizeKivi) and head_dim is not None and head_dim % op.group:
            op = dataclasses.replace(op, group=head_dim)
        out[spec] = op.spec
    for r in levels:
        for name in presses():
            out[f"{name}@{r:g}"] = parse_op(f"{name}:compression_ratio={r}").spec
        if "random" in presses():
            for seed in seeds[1:]:
                out[f"{SEED_LABEL}{seed}@{r:g}"] = parse_op(f"random:compression_ratio={r},seed={seed}").spec
        if "snapkv" in presses() and r in QUESTION_WINDOW_LEVELS:
            # (aware) the prefill's last tokens: the question
            question = max(1, prompt.answer - 1 - prompt.question)
            out[f"{QUESTION_WINDOW}@{r:g}"] = parse_op(f"snapkv:compression_ratio={r},window={question}").spec
        for name in policies():
            out[f"{name}@{r:g}"] = parse_op(frontier.matched_policy(name, P, D, r)).spec
        size = frontier.matched_budget(P, D, r)
        out[f"window@{r:g}"] = parse_op(f"window:size={size},sinks={frontier.STREAMING_SINKS}").spec
    return out


def level_of(label: str) -> float | None:
    return float(label.rsplit("@", 1)[1]) if "@" in label else None


def _accuracy(records: list[dict]) -> float:
    return sum(r["correct"] for r in records) / len(records) if records else float("nan")


def by_depth(records: list[dict]) -> dict:
    """{context: {depth: accuracy}} of per-prompt records."""
    out: dict = {}
    for r in records:
        out.setdefault(str(r["context"]), {}).setdefault(str(r["depth"]), []).append(r["correct"])
    return {c: {d: sum(v) / len(v) for d, v in ds.items()} for c, ds in out.items()}


def needle_summary(shares: list, records: list[dict]) -> dict:
    """From the per-prompt (layers, kv_heads) needle shares: their mean per layer and head, and the
    prompts (indices into the records) on which the cache holds none of the needle's entries, with
    how many of those were still answered right."""
    lost = [i for i, s in enumerate(shares) if lost_by_construction(s)]
    return {"needle_kept_mean": np.asarray(shares, dtype=float).mean(0).round(4).tolist(),
            "construction_losses": {"prompts": lost,
                                    "correct": sum(bool(records[i]["correct"]) for i in lost)}}


def score_haystack(loaded, prompts: list[Prompt], labels_by_context: dict[int, dict[str, str]],
                   progress: bool = True) -> dict:
    """Context by context from the shortest: the exact cache and every method on each prompt (one
    prefill), in both regimes, each method's records under its label; then the gate. Once a
    context's exact misses are too many for the gate, its methods are no longer scored (no method
    is judged where the exact cache fails), and the longer contexts are not run at all (retrieval
    over a longer haystack is not expected to be easier; the page names what was not run)."""
    exact, exact_followups, kept, not_run, failed_at = [], [], [], {}, None
    ops, refused, seconds = {}, {}, {"exact_and_methods": 0.0, "per_op": {}}
    for context in sorted({p.context for p in prompts}):
        at = [p for p in prompts if p.context == context]
        if failed_at is not None:
            not_run[str(context)] = failed_at
            continue
        allowed = int((1 - GATE) * len(at) + 1e-9)  # misses the gate tolerates

        def hopeless(records, allowed=allowed):
            return sum(not r["correct"] for r in records) > allowed
        run = score_retrieval(loaded, list(labels_by_context[context].values()), at, REGIMES, progress,
                              hopeless)
        exact += run["exact"]
        exact_followups += run["exact_followups"]
        kept += at
        refused.update(run["refused"])
        seconds["exact_and_methods"] += run["exact_seconds"]
        for spec, s in run["seconds"].items():
            seconds["per_op"][spec] = seconds["per_op"].get(spec, 0.0) + s
        if _accuracy(run["exact"]) < GATE:
            failed_at = context
            continue
        _collect(ops, run["ops"], labels_by_context[context], context, range(len(kept) - len(at), len(kept)))
    prompts = kept
    contexts = sorted({p.context for p in prompts})
    gate = {str(c): _accuracy([r for r in exact if r["context"] == c]) >= GATE for c in contexts}
    for entry in ops.values():
        for regime in REGIMES:
            r = entry[regime]
            r["accuracy"] = _accuracy(r["per_prompt"])
            r["by_depth"] = by_depth(r["per_prompt"])
            r["mean_key_logprob"] = float(np.mean([x["key_logprob"] for x in r["per_prompt"]]))
            r["mean_held_bytes"] = float(np.mean(r["held_bytes"]))
            r.update(needle_summary(r["needle_kept"], r["per_prompt"]))
    ops = fold_seeds(ops)
    full = float(np.mean([cache_bytes(loaded.config, Exact(), prefill_length(p, "agnostic"), loaded.dtype)
                          for p in prompts]))
    out = {"exact": {"per_prompt": exact, "accuracy": _accuracy(exact), "by_depth": by_depth(exact),
                     "held_bytes": full},
           "gate": gate, "contexts": contexts, "not_run": not_run, "prompts": [p.record() for p in prompts],
           "ops": ops,
           "refused": refused, "seconds": seconds}
    return followups.summarise(out, exact_followups, GATE)


def _collect(ops: dict, scored: dict, labels: dict[str, str], context: int, prompts: range) -> None:
    """One context's scores of each method (`scored`, by spec) appended to its label's entry in `ops`."""
    for label, spec in labels.items():
        if spec not in scored:
            continue
        entry = ops.setdefault(label, {"specs": {}, "level": level_of(label),
                                       "family": parse_op(spec).family})
        entry["specs"][str(context)] = spec
        for regime in REGIMES:
            got = scored[spec][regime]
            r = entry.setdefault(regime, {"per_prompt": [], "held_bytes": [], "needle_kept": [],
                                          "prompts": []})
            r["per_prompt"] += got["per_prompt"]
            r["held_bytes"] += got["held_bytes"]
            r["needle_kept"] += got["needle_kept"]
            r["prompts"] += list(prompts)
            r.setdefault("followups", []).extend(got["followups"])
            r.setdefault("followup_needle_kept", []).extend(got["followup_needle_kept"])


def fold_seeds(ops: dict) -> dict:
    """The ops with each extra random seed's entry ("random-seed1@0.25") folded into its level's
    random entry ("random@0.25") as, per regime, "seeds": the seeds, the keys each retrieved (of
    "n" prompts), their mean accuracy and its range. The first seed's records stay the method's own
    (its paired tests, its points on the figures)."""
    out = {label: entry for label, entry in ops.items() if not label.startswith(SEED_LABEL)}
    for label, extra in ops.items():
        base = out.get(f"random@{label.rsplit('@', 1)[-1]}") if label.startswith(SEED_LABEL) else None
        if base is None:
            continue
        for regime in REGIMES:
            seeds = base[regime].setdefault("seeds", {
                "seed": [parse_op(next(iter(base["specs"].values()))).setting("seed")],
                "correct": [sum(x["correct"] for x in base[regime]["per_prompt"])]})
            seeds["seed"].append(int(label[len(SEED_LABEL):].split("@")[0]))
            seeds["correct"].append(sum(x["correct"] for x in extra[regime]["per_prompt"]))
            n = len(base[regime]["per_prompt"])
            accuracy = [k / n for k in seeds["correct"]]
            seeds.update(n=n, mean_accuracy=float(np.mean(accuracy)), accuracy_range=[min(accuracy),
                                                                                      max(accuracy)])
    return out


def verdicts(result: dict) -> list[dict]:
    """Over the prompts of the contexts that pass the gate, paired per prompt: each method against
    the exact cache, against random and the window at its level, and aware against agnostic —
    McNemar on right/wrong (`metric` "correct") and the paired bootstrap on the key's
    log-probability (`metric` "key_logprob")."""
    exact = result["exact"]["per_prompt"]
    out = []

    def both(a_name, a_rec, b_name, b_rec, regime, against):
        for metric in ("correct", "key_logprob"):
            a = [float(x[metric]) for x in a_rec]
            b = [float(x[metric]) for x in b_rec]
            p = compare.paired(a, b, a_name, b_name, unit="prompts")
            out.append({**p.to_dict(), "metric": metric, "regime": regime, "against": against})

    for label, entry in result["ops"].items():
        for regime in REGIMES:
            records = entry[regime]["per_prompt"]
            both(label, records, "exact", [exact[i] for i in entry[regime]["prompts"]], regime, "exact")
            level = entry["level"]
            for base in (f"random@{level:g}", f"window@{level:g}") if level is not None else ():
                other = result["ops"].get(base)
                paired = other is not None and other[regime]["prompts"] == entry[regime]["prompts"]
                if base != label and paired:
                    both(label, records, base, other[regime]["per_prompt"], regime, base.split("@")[0])
        both(f"{label} aware", entry["aware"]["per_prompt"], f"{label} agnostic",
             entry["agnostic"]["per_prompt"],
             "both", "regime")
    return out


def kendall(x: list[float], y: list[float]) -> float:
    tau = scistats.kendalltau(x, y).statistic
    return float(tau) if np.isfinite(tau) else float("nan")


def kl_vs_retrieval(frontier_run: dict | None, results: dict, regime: str = "aware") -> dict:
    """Does the KL frontier's ranking predict the retrieval ranking? Per press level, Kendall's τ
    between the methods' mean KL (the frontier, per document) and their retrieval accuracy (over
    every gated prompt of every haystack; higher KL should mean lower accuracy, so agreement is
    τ < 0), with a 95 % bootstrap interval resampling the documents and the prompts together."""
    if not frontier_run:
        return {"regime": regime, "levels": {}, "why": "the frontier was not run for this model"}
    kl = {}  # label -> per-document KL
    for spec, r in frontier_run["ops"].items():
        label = frontier_label(spec, r.get("level"))
        if label is not None:
            kl[label] = r["per_doc_kl"]
    correct = {}  # label -> right/wrong per gated prompt, over the haystacks
    for hay in results.values():  # every method's records are on the gated prompts only
        for label, entry in hay["ops"].items():
            correct.setdefault(label, []).extend(float(x["correct"]) for x in entry[regime]["per_prompt"])
    out = {}
    for level in sorted({level_of(lab) for lab in kl if level_of(lab) is not None}):
        labels = [lab for lab in kl if level_of(lab) == level and correct.get(lab)]
        if len(labels) < 3:
            continue
        K = np.asarray([kl[lab] for lab in labels])  # (methods, documents)
        C = np.asarray([correct[lab] for lab in labels])  # (methods, prompts)
        tau = kendall(K.mean(1).tolist(), C.mean(1).tolist())
        rng = np.random.default_rng(SEED)
        boots = []
        for _ in range(BOOTSTRAP):
            k = K[:, rng.integers(0, K.shape[1], K.shape[1])].mean(1)
            c = C[:, rng.integers(0, C.shape[1], C.shape[1])].mean(1)
            t = kendall(k.tolist(), c.tolist())
            if np.isfinite(t):
                boots.append(t)
        ci = [float(np.percentile(boots, 2.5)), float(np.percentile(boots, 97.5))] if boots else None
        out[f"{level:g}"] = {"methods": labels, "tau": tau, "ci95": ci, "n_documents": int(K.shape[1]),
                             "n_prompts": int(C.shape[1]), "mean_kl": dict(zip(labels, K.mean(1).tolist())),
                             "accuracy": dict(zip(labels, C.mean(1).tolist())),
                             "predicts": ci is not None and ci[1] < 0}
    return {"regime": regime, "levels": out}


def frontier_label(spec: str, level) -> str | None:
    """The retrieval label of a frontier op: presses by name and level, a matched window or
    decode-time policy by its name and the level it matches."""
    op = parse_op(spec)
    if isinstance(op, Window) and level is not None and op.sinks == frontier.STREAMING_SINKS:
        return f"window@{level:g}"
    if op.name in policies():
        return f"{op.name}@{level:g}" if level is not None and float(level) in LEVELS else None
    ratio = op.setting("compression_ratio")
    if ratio is not None and op.name in presses() and float(ratio) in LEVELS:
        return f"{op.name}@{float(ratio):g}"
    return spec if spec in precision() else None


def score_model(loaded, prompts_by_haystack: dict[str, list[Prompt]], progress: bool = True) -> dict:
    """Per haystack {exact, ops, prompts, gate, contexts, verdicts}: what the retrieval test computes
    on one model (make book runs it as one job per model: `retrieval_unit.compute`). Each haystack is
    a checkpoint unit (`kvutils.core.checkpoints`), keyed by the model, the prompts and the methods."""
    out = {}
    for hay, prompts in prompts_by_haystack.items():
        hay_contexts = sorted({p.context for p in prompts})
        labels = {c: method_specs(next(p for p in prompts if p.context == c),
                                  loaded.config) for c in hay_contexts}

        def compute(prompts=prompts, labels=labels) -> dict:
            with torch.inference_mode():
                result = score_haystack(loaded, prompts, labels, progress)
            result["verdicts"] = verdicts(result)
            if "followups" in result["exact"]:
                result["followup_verdicts"] = followups.verdicts(result)
            return result
        key = checkpoints.digest([p.record() for p in prompts], [p.chain for p in prompts], labels) \
            if any(p.followups for p in prompts) else \
            checkpoints.digest([p.record() for p in prompts], [p.ids for p in prompts], labels)
        out[hay] = checkpoints.stored(f"retrieval-{loaded.name}-{hay}-{key}", compute)
    return out


def run_model(loaded, prompts_by_haystack: dict[str, list[Prompt]], frontier_run: dict | None,
              progress: bool = True) -> dict:
    """retrieval.<model>: per haystack {exact, ops, prompts, gate, contexts, verdicts}, and
    "kl_vs_retrieval"."""
    return with_kl(score_model(loaded, prompts_by_haystack, progress), frontier_run)


def with_kl(scored: dict, frontier_run: dict | None) -> dict:
    """A model's scored haystacks (`score_model`) with "kl_vs_retrieval" against its frontier run."""
    return {**scored, "kl_vs_retrieval": kl_vs_retrieval(frontier_run, scored)}
