"""The two appendices: how the pages were produced (models with hashes, packages, parameters, git
commit, machine, wall time per chapter, commands to rerun on the article's models) and the
performance report rendered from `results/bench.json`."""
from __future__ import annotations

import shlex
import time
from pathlib import Path

import pandas as pd

from kvutils.core.article import article
from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.records import check_fields, load_record, load_results
from kvutils.core.results import busy, results_path
from kvutils.report.figures import styled
from kvutils.report.text import fmt
from kvutils.report.timing import ARTICLE_CONTEXT, against_published, speedup_text, spread_text
from kvutils.studies.bench_args import job_records

# The models the article used (and chapter 5's intended one), per chapter and parameter: hub ids
# that run where their weights are on the machine (local Hugging Face cache or a local folder).
ARTICLE_MODELS = {
    "01": {"models": "EleutherAI/pythia-160m"},
    "02": {"models": "EleutherAI/pythia-160m", "encoder": "bert-base-uncased"},
    "03": {"models": "EleutherAI/pythia-160m", "encoder": "bert-base-uncased"},
    "04": {"models": "EleutherAI/pythia-160m", "table2_models": "EleutherAI/pythia-160m"},
    "05": {"models": "Qwen/Qwen3-0.6B"},
}
BOOK_TARGET_S = 60 * 60
# chapter 5's Qwen, and the chapters that run without it by default (make book's 40 minutes on 2 cores
# leave no room for it, chapter 5 included): what adding it would cost is estimated from their own runs
CHAPTER5_QWEN = "qwen2.5-0.5b"
WITHOUT_QWEN = ("01_cache_exactness", "02_bert_contrast", "03_sense_probes", "04_cache_approximations",
                "05_qwen3_switch")


def rerun_commands() -> pd.DataFrame:
    """Per chapter, the two ways to rerun it on the article's models."""
    rows = []
    for n, params in ARTICLE_MODELS.items():
        flags = " ".join(f"-p {k} {shlex.quote(v)}" for k, v in params.items())
        name = NOTEBOOKS[n]
        rows.append({"chapter": f"{n} {name}", "models": ", ".join(dict.fromkeys(params.values())),
                     "rerun and rebuild the book": f'make chapter N={n} PARAMS="{flags}"',
                     "papermill alone": f"mkdir -p runs && papermill notebooks/{name}.ipynb "
                                        f"runs/{name}.ipynb {flags}"})
    return pd.DataFrame(rows).set_index("chapter")


def qwen_left_out(runs: dict, model: str = CHAPTER5_QWEN) -> tuple[pd.DataFrame, dict[str, str]]:
    """Per chapter of WITHOUT_QWEN that ran without `model`: its wall time, and an estimate of what
    adding `model` to its `models` would add, assuming the chapter's time grows with the weights each
    token multiplies through (`kvutils.models.loading.per_token_weights`): wall time × w(model) ÷ the
    sum of w over its models. Returns the table and the sentence (`qwen_left_out`) that names what
    was left out, its estimated cost and the model's fp64 weights (chapter 1 loads each model in fp64)."""
    from kvutils.models.checks import parse_model_list
    from kvutils.models.loading import per_token_weights

    counts: dict[str, dict] = {}

    def w(name: str) -> int:
        if name not in counts:  # not setdefault: its default would build the skeleton on every call
            counts[name] = per_token_weights(name)
        return counts[name]["layers"] + counts[name]["head"]
    share_col = "FLOPs per token: the Qwen's ÷ theirs"
    rows, extra = [], {}
    for chapter in WITHOUT_QWEN:
        run = runs.get(chapter)
        names = parse_model_list(run["parameters"]["models"]) if run else []
        if run is None or model in names:
            continue
        share = w(model) / sum(w(n) for n in names)
        extra[chapter] = run["wall_time_s"] * share
        rows.append({"chapter": chapter, "models": ", ".join(names),
                     "wall time (min)": fmt(run["wall_time_s"] / 60, 3), share_col: fmt(share, 3),
                     "with the Qwen: estimated extra (min)": fmt(extra[chapter] / 60, 3)})
    table = pd.DataFrame(rows, columns=["chapter", "models", "wall time (min)", share_col,
                                        "with the Qwen: estimated extra (min)"]).set_index("chapter")
    if not extra:
        return table, {"qwen_left_out": f"every chapter that could run {model} ran it"}
    fp64_gb = w(model) and counts[model]["parameters"] * 8 / 1e9
    return table, {"qwen_left_out": (
        f"{model} is left out of {', '.join(extra)}. Adding it would take an estimated "
        f"{fmt(sum(extra.values()) / 60, 3)} more minutes of one thread in all, and {fmt(fp64_gb, 2)} GB for "
        "its weights in fp64 in chapter 1")}


def available_runs(results_dir) -> dict[str, dict]:
    """The chapters' results files that exist (a chapter never run is simply absent), checked for
    what appendix A reads."""
    runs = _existing_runs(results_dir)
    check_fields(results_dir, "appendix A", lambda: reproducibility_glue(runs), lambda: models_table(runs),
                 lambda: runs_table(runs), lambda: packages_table(runs), lambda: parameters_table(runs))
    return runs


def _existing_runs(results_dir) -> dict[str, dict]:
    return {name: load_results(results_dir, name) for name in NOTEBOOKS.values()
            if results_path(results_dir, name).is_file()}


def load_bench(results_dir) -> tuple[dict, dict]:
    """bench.json and the chapters' results, as appendix B reads them, each checked against its
    format; a missing or damaged file is an error naming it."""
    path = Path(results_dir) / "bench.json"
    if not path.is_file():
        raise FileNotFoundError(f"results_dir: no bench.json in {results_dir}; run make bench (python -m "
                                "kvutils.bench)")
    bench = load_record(path, "bench", "results_dir", "rerun make bench")
    jobs = job_records(results_dir)  # make book's jobs before the benchmark, as the build left them
    # the studies: not the pages, not itself
    bench = {**bench, "jobs": {name: job for name, job in jobs.items()
                               if job["kind"] not in ("pages", "bench")}}
    runs = _existing_runs(results_dir)
    check_fields(results_dir, "appendix B (with bench.json)", lambda: performance_glue(bench, runs),
                 lambda: performance_table(bench), lambda: book_times_table(bench, runs))
    return bench, runs


def models_table(runs: dict) -> pd.DataFrame:
    """Every model any chapter loaded: class, size, dtype and the sha256 of its weight file."""
    rows: dict[tuple, dict] = {}
    for chapter, run in runs.items():
        for m in run["models"]:
            key = (m["name"], m.get("source_sha256"))
            row = rows.setdefault(key, {"model": m["name"], "class": m.get("class", "—"),
                                        "layers": m.get("layers"),
                                        "parameters": fmt(m.get("parameters")), "dtypes": set(),
                                        "chapters": [],
                                        "weights sha256": m.get("source_sha256") or "— (random, seeded)"})
            row["dtypes"].add(m.get("dtype", "—"))
            row["chapters"].append(chapter[:2])
    table = pd.DataFrame([{**r, "dtypes": ", ".join(sorted(r["dtypes"])),
                           "chapters": ", ".join(dict.fromkeys(r["chapters"]))}
                          for r in rows.values()])
    return table.set_index("model")


def packages_table(runs: dict) -> pd.DataFrame:
    """Package versions; a package whose version differed between chapters shows each."""
    versions: dict[str, dict[str, list[str]]] = {}
    for chapter, run in runs.items():
        for package, version in run["packages"].items():
            versions.setdefault(package, {}).setdefault(version, []).append(chapter[:2])
    rows = [{"package": p, "version": next(iter(v)) if len(v) == 1 else
             "; ".join(f"{ver} (chapters {', '.join(chs)})" for ver, chs in v.items())}
            for p, v in versions.items()]
    return pd.DataFrame(rows).set_index("package")


def runs_table(runs: dict) -> pd.DataFrame:
    """Per chapter: wall time, when it finished, the git commit, and the machine's cores/threads."""
    rows = [{"chapter": chapter, "wall time (s)": fmt(run["wall_time_s"], 4), "finished": run["finished"],
             "git commit": run["git_commit"], "cores": run["machine"]["cores"],
             "torch threads": run["machine"]["torch_threads"]} for chapter, run in runs.items()]
    return pd.DataFrame(rows).set_index("chapter")


def parameters_table(runs: dict) -> pd.DataFrame:
    """Every parameter of every chapter as it ran (results_dir is where the run wrote, so left out)."""
    rows = [{"chapter": chapter, "parameter": k, "value": repr(v)} for chapter, run in runs.items()
            for k, v in run["parameters"].items() if k != "results_dir"]
    return pd.DataFrame(rows).set_index(["chapter", "parameter"])


def machine_text(runs: dict) -> str:
    machines = {tuple(sorted(r["machine"].items())) for r in runs.values()}
    parts = []
    for m in machines:
        m = dict(m)
        parts.append(f"{m['platform']}, {m['processor']}, {m['cores']} cores, Python {m['python']}")
    return "; ".join(parts) if parts else "no chapter has run"


def reproducibility_glue(runs: dict) -> dict[str, str]:
    commits = sorted({r["git_commit"] for r in runs.values()})
    total = sum(r["wall_time_s"] for r in runs.values())
    return {"commits": ", ".join(commits) or "none", "n_commits": str(len(commits)),
            "machine": machine_text(runs), "total_s": fmt(total, 4), "total_min": fmt(total / 60, 3),
            "n_chapters": str(len(runs))}


# --- the performance report (results/bench.json) ---

def performance_rows(bench: dict) -> list[dict]:
    """Each measured ratio beside its target, from one run of `python -m kvutils.bench`."""
    lo, d, r, t, s = bench["load"], bench["decode"], bench["recompute"], bench["teacher"], bench["step_2000"]
    rows = [
        {"measure": "model load: first (GGUF conversion) ÷ from the converted cache" if lo["converts"] else
         "model load: first ÷ second (a tiny model: nothing to convert)",
         "measured": f"{fmt(lo['first_load_s'], 3)} s ÷ {fmt(lo['cached_load_s'], 3)} s (one run each)",
         "ratio": lo["speedup"],
         "target": "a cached load takes a few seconds", "met": lo["cached_load_s"] < 10},
        {"measure": "cached decode per token: kvutils ÷ transformers' generate",
         "measured": _timed(d['kvutils_ms_per_token'], d.get("kvutils_ms_per_token_repeats"), "ms") + " ÷ "
                     + _timed(d['generate_ms_per_token'], d.get("generate_ms_per_token_repeats"), "ms"),
         "ratio": d["ratio_kvutils_over_generate"], "target": "≤ 1.05",
         "met": d["ratio_kvutils_over_generate"] <= 1.05},
        {"measure": "no-cache side of chapter 1: regenerate every step ÷ one forward",
         "measured": _timed(r['per_step_s'], r.get("per_step_repeats_s"), "s") + " ÷ "
                     + _timed(r['one_pass_s'], r.get("one_pass_repeats_s"), "s"), "ratio": r["speedup"],
         "target": "—", "met": None},
        {"measure": f"teacher forcing ({t['op']}, {t['dtype']}): step-by-step ÷ fast path",
         "measured": f"{fmt(t['step_s'], 3)} s ÷ {fmt(t['fast_s'], 3)} s (one run each); max |Δlogit| "
                     f"{fmt(t['max_logit_diff'], 2)}",
         "ratio": t["speedup"], "target": "≥ 10, |Δlogit| ≤ 1e-4",
         "met": t["speedup"] >= 10 and t["max_logit_diff"] <= 1e-4},
        {"measure": f"decode step at {s['context']} tokens: recompute ÷ cached",
         "measured": _timed(s['uncached_ms'], s.get("uncached_repeats_ms"), "ms", 4) + " ÷ "
                     + _timed(s['cached_ms'], s.get("cached_repeats_ms"), "ms")
                     + f"; speed-up {speedup_text(s)}",
         "ratio": s["speedup"],
         "target": "—", "met": None},
    ]
    return rows + _measured_elsewhere_rows(bench)


def _measured_elsewhere_rows(bench: dict) -> list[dict]:
    """The rows of what a run measures only where it can: the teacher-forcing variants, the
    decode-time policy, the bandwidth bound and chapter 5's switch."""
    s, rows = bench["step_2000"], []
    for key, target in (("teacher_fp64", 1e-9), ("teacher_fp32_discrete", None), ("teacher_press", 1e-4)):
        if key in bench:
            q = bench[key]
            rows.append({"measure": f"teacher forcing ({q['op']}, {q['dtype']}): step-by-step ÷ fast path",
                         "measured": f"{fmt(q['step_s'], 3)} s ÷ {fmt(q['fast_s'], 3)} s (one run each); max "
                                     f"|Δlogit| {fmt(q['max_logit_diff'], 2)}", "ratio": q["speedup"],
                         "target": f"|Δlogit| ≤ {target:g}: the same computation" if target else
                                   "none: rounding before quantising can change a level",
                         "met": q["max_logit_diff"] <= target if target else None})
    if "decode_policy" in bench:
        q = bench["decode_policy"]
        rows.append({"measure": f"decode-time policy ({q['op']}, step path only) ÷ the exact cache's fast "
                                "path",
                     "measured": f"{fmt(q['policy_step_s'], 3)} s ÷ {fmt(q['exact_fast_s'], 3)} s (one run "
                                 "each)",
                     "ratio": q["over_exact_fast"],
                     "target": "reported (the price of deciding after every token)",
                     "met": None})
        rows.append({"measure": f"decode-time policy ({q['op']}) ÷ the exact cache, both on the step path",
                     "measured": f"{fmt(q['policy_step_s'], 3)} s ÷ {fmt(q['exact_step_s'], 3)} s (one run "
                                 "each)",
                     "ratio": q["over_exact_step"], "target": "reported (the policy's own decisions)",
                     "met": None})
    if "bound_ms" in s:
        rows.append({"measure": f"cached decode step at {s['context']} tokens ÷ memory-bandwidth bound",
                     "measured": f"{_timed(s['cached_ms'], s.get('cached_repeats_ms'), 'ms')} ÷ "
                                 f"{fmt(s['bound_ms'], 3)} ms ({fmt(bench['bandwidth_gb_s'], 3)} GB/s "
                                 "measured)",
                     "ratio": s["cached_ms"] / s["bound_ms"], "target": "reported (1 = bandwidth-bound)",
                     "met": None})
    for k, row in bench["switch"].items():
        rows.append({"measure": f"LoRA-tail switch, k = {k}: tail patch ÷ full recompute",
                     "measured": f"{fmt(row['tail_patch_ms'], 3)} ms ÷ {fmt(row['recompute_ms'], 3)} ms "
                                 f"(medians of {bench.get('repeats', '?')} repeats; chapter 5's benchmark "
                                 "keeps no spread)",
                     "ratio": row["time_fraction"], "target": f"FLOPs share {fmt(row['flops_fraction'], 3)}",
                     "met": None})
    return rows


def _timed(median: float, repeats: list[float] | None, unit: str, digits: int = 3) -> str:
    """A benchmark time with its spread where the repeats were kept, else the one number it has."""
    if repeats:
        return spread_text(repeats, unit, digits)
    return f"{fmt(median, digits)} {unit} (repeats not recorded)"


def step_agreement(bench: dict, runs: dict) -> str:
    """The benchmark's decode step at its long context beside chapter 4's at the same context and
    model: both with their spreads and the conditions each was timed under. They are separate
    measurements (different moments, possibly different threads), so the sentence places them and
    says why they may differ; no verdict."""
    s = bench["step_2000"]
    threads = s.get("threads", bench["machine"]["torch_threads"])
    art = article()["e4_decode_time"]["ctx_2000"]["speedup"]
    published = against_published(s, art, ARTICLE_CONTEXT, "the article")
    ours = (f"The benchmark timed the decode step at {s['context']} tokens on {bench['model']}, after the "
            f"chapters. It ran alone on {bench['machine']['cores']} cores and {threads} torch thread(s). "
            f"Speed-up: {speedup_text(s)}. {published[:1].upper()}{published[1:]}.")
    ch4 = runs.get(NOTEBOOKS["04"], {}).get("numbers", {})
    steps = ch4.get("decode", {}).get(bench["model"], {}).get("steps", [])
    step = next((x for x in steps if x["context"] == s["context"]), None)
    if step is None:
        return ours + (f" Chapter 4 did not time {bench['model']} at {s['context']} tokens in this build, "
                       "so there is nothing to set it beside")
    timing = ch4.get("decode_timing") or {}
    where = (f"{timing.get('where', 'in its own run')}, on {timing.get('threads', '?')} torch thread(s) of "
             f"{timing.get('cores', '?')} cores")
    a, b = s.get("speedups"), step.get("speedups")
    if a and b:
        apart = max(a) < min(b) or max(b) < min(a)
        relation = ("the two ranges of repeat-pair speed-ups do not overlap" if apart else
                    "the two ranges of repeat-pair speed-ups overlap")
    else:
        relation = "one of the two kept no repeats, so their spreads cannot be set side by side"
    return (ours + f" Chapter 4 timed the same step {where}. Speed-up: {speedup_text(step)}. "
            f"{relation.capitalize()}. They are separate measurements, taken at different moments of the "
            "build. The machine's state at each (other work, memory bandwidth, frequency) enters each. "
            "Neither is the book's one speed-up")


def performance_table(bench: dict) -> pd.DataFrame:
    rows = [{**r, "ratio": fmt(r["ratio"], 4), "met": {True: "yes", False: "no", None: "—"}[r["met"]]}
            for r in performance_rows(bench)]
    return pd.DataFrame(rows).set_index("measure")


def _load_text(*loads: dict | None) -> str:
    """How busy other work kept the CPU around a timed job (its records' samples before and after)."""
    taken = [load for load in loads if load]
    if not taken:
        return ""
    worst = max(load["cpu_busy_pct"] or 0 for load in taken)
    flag = "BUSY: its times include other work" if any(busy(load) for load in taken) else "idle"
    return f"{flag} ({fmt(worst, 2)} % of the CPU in other use, at most)"


def _job_start(job: dict) -> float:
    return time.mktime(time.strptime(job["started"], "%Y-%m-%d %H:%M:%S"))


def book_time_rows(bench: dict, runs: dict) -> list[dict]:
    """Wall time of every step of `make book` on record, and the total. The jobs (kvutils.book.jobs)
    ran side by side, so together they count once, from the first one's start to the last one's
    end; each row says whether the build computed the job or reused it, on how many threads, and how
    busy other work kept the machine around a timed one. A build with no job records (run by
    hand) counts each chapter's own wall time."""
    jobs = bench.get("jobs") or {}
    rows = []
    if "setup_s" in bench:
        rows.append({"step": "set-up (venv, packages, models, conversion)", "seconds": bench["setup_s"],
                     "counted": True})
    number = {name: n for n, name in NOTEBOOKS.items()}
    for chapter, run in runs.items():
        job = jobs.get(number.get(chapter))
        rows.append({"step": f"chapter {chapter}", "seconds": job["wall_s"] if job else run["wall_time_s"],
                     "counted": not jobs, "job": job})
    parts = {"timing": "chapter 4's decode steps, timed alone",
             "costs": "chapter 4's Table 2, frontier and bytes"}
    for name, job in jobs.items():  # chapter 4's other studies, each a job beside the chapters
        if name not in NOTEBOOKS:
            step = parts.get(name) or f"chapter 4's retrieval test on {job['parameters'].get('model', name)}"
            rows.append({"step": step, "seconds": job["wall_s"], "counted": False, "job": job})
    if jobs:
        computed = [j for j in jobs.values() if j["status"] == "computed"]
        span = (max(_job_start(j) + j["wall_s"] for j in computed)
                - min(_job_start(j) for j in computed)) if computed else 0.0
        rows.append({"step": f"the {len(jobs)} jobs above, side by side: first start to last end of those "
                             "computed",
                     "seconds": span, "counted": True})
    if "wall_time_s" in bench:
        rows.append({"step": "benchmark (python -m kvutils.bench, alone)", "seconds": bench["wall_time_s"],
                     "counted": True,
                     "load": bench.get("machine_load")})
    total = sum(r["seconds"] for r in rows if r["counted"])
    rows.append({"step": "total on record", "seconds": total, "counted": True})
    return rows


def _how(row: dict) -> str:
    job = row.get("job")
    if job is None:
        return ""
    done = ("computed" if job["status"] == "computed" else f"reused (computed at {job['commit'][:12]}, "
                                                           f"{job['finished']})")
    # an interrupted run's finished units read back
    if job["status"] == "computed" and job.get("resumed_units"):
        done += f", resumed from {job['resumed_units']} stored unit{'s' * (job['resumed_units'] != 1)}"
    used = job.get("threads_used") or [job["threads"]]  # it took the cores of the jobs that ended before it
    counts = [n for i, n in enumerate(used) if i == 0 or n != used[i - 1]]
    return f"{done}, {' → '.join(map(str, counts))} thread{'s' * (counts != [1])}"


def book_times_table(bench: dict, runs: dict) -> pd.DataFrame:
    rows = book_time_rows(bench, runs)
    table = pd.DataFrame([{"step": r["step"], "seconds": r["seconds"]} for r in rows])
    table["minutes"] = [fmt(s / 60, 3) for s in table["seconds"]]
    table["seconds"] = [fmt(s, 4) for s in table["seconds"]]
    table["job"] = [_how(r) for r in rows]
    table["machine around it"] = [_load_text(r["job"].get("load_before"), r["job"].get("load_after"))
                                  if r.get("job") else _load_text(*(r.get("load") or {}).values())
                                  for r in rows]
    table["in the total"] = ["yes" if r["counted"] else "no (inside the jobs' span)" for r in rows]
    return table.set_index("step")


@styled
def plot_performance(bench: dict):
    """Each speed ratio of the benchmark on one log axis, the targets drawn where there is one."""
    import textwrap

    import matplotlib.pyplot as plt

    rows = performance_rows(bench)
    labels = [textwrap.fill(r["measure"], 44) for r in rows]  # long names wrap rather than squeeze the bars
    mean_lines = sum(len(t.splitlines()) for t in labels) / len(labels)
    fig, ax = plt.subplots(figsize=(7.5, 0.42 * mean_lines * len(rows) + 1.8))
    colours = ["#2a9d8f" if r["met"] else "#e76f51" if r["met"] is False else "#8d99ae" for r in rows]
    ax.barh(range(len(rows)), [r["ratio"] for r in rows], color=colours)
    ax.set_xscale("log")
    ax.axvline(1, color="black", linewidth=0.8)
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("ratio (log scale; 1 = equal time)")
    ax.set_ylabel("measurement")
    ax.set_title(f"Benchmark ratios, measured side by side in one run\nmodel: {bench['model']}, "
                 f"{bench['machine']['cores']} cores")
    fig.tight_layout()
    return fig


def performance_glue(bench: dict, runs: dict) -> dict[str, str]:
    total_s = book_time_rows(bench, runs)[-1]["seconds"]
    met = [r for r in performance_rows(bench) if r["met"] is not None]
    return {"model": bench["model"], "total_min": fmt(total_s / 60, 3),
            "step_agreement": step_agreement(bench, runs),
            "target_min": fmt(BOOK_TARGET_S / 60), "within": "within" if total_s <= BOOK_TARGET_S else "over",
            "n_met": f"{sum(bool(r['met']) for r in met)} of {len(met)}",
            "cores": str(bench["machine"]["cores"]), "threads": str(bench["machine"]["torch_threads"])}
