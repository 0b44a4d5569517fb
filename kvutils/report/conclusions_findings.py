"""The conclusions page as findings (`kvutils.report.findings`): its answer, its box and each section's
point, drawn from the chapters' own findings where they have them; and what carries over to serving
(issue 50, item 5): what is a theorem, what was measured here and on what, what this book cannot say,
and the acceptance command that checks an operation on a reader's own model."""

from __future__ import annotations

import shlex

from kvutils.cache import accept_args
from kvutils.core.article import article
from kvutils.core.catalog import NOTEBOOKS
from kvutils.lora.switching import nan_max
from kvutils.report.cache_exactness import chapter1_findings
from kvutils.report.conclusions import ATTENTION_CAPTION, attention_table, conclusions_glue
from kvutils.report.conclusions_tables import causal_models
from kvutils.report.findings import Finding, PageFindings, Section, Shown, Test, captioned
from kvutils.report.guide import COSTLY, EXACT, NEAR, OPEN, chapter_numbers, guide_coverage
from kvutils.report.guide_compact import compact_guide
from kvutils.report.sense_probes import chapter3_findings
from kvutils.report.switch_findings import activated_finding, exact_finding, knee_finding, stale_finding
from kvutils.report.tables import PageTable, rows_table
from kvutils.report.text import fmt

# the acceptance test a reader runs on their own model: passkey retrieval under SnapKV at half the cache
ACCEPT_ARGS = (
    "--task",
    "passkey",
    "--model",
    "smollm2-135m",
    "--haystack",
    "pydoc",
    "--context",
    "1024",
    "--n-prompts",
    "24",
    "--op",
    "snapkv:compression_ratio=0.5",
    "--out",
    "results/passkey.json",
)
THEOREM_RESTS = (
    "causal attention: an entry depends only on the tokens before it and the weights that computed it"
)


def acceptance_command(args: tuple[str, ...] = ACCEPT_ARGS) -> str:
    """The command as a reader types it, checked against the acceptance test's own parser first (a flag
    renamed there fails here, not in a reader's terminal)."""
    _, parsed = accept_args.parse(list(args))
    if parsed.task != "passkey":
        raise ValueError(f"acceptance_command: --task is {parsed.task!r}, the serving check uses 'passkey'")
    return "python -m kvutils.accept " + " ".join(shlex.quote(a) for a in args)


def _approximations(rows: list[dict]) -> list[dict]:
    """The guide's chapter-4 rows: operations that change what is stored."""
    return [r for r in rows if not r["setting"].startswith("chapters 1 and 5")]


def rq3_finding(rows: list[dict], model: str, near_exact_pct: float) -> Finding:
    ops = _approximations(rows)
    count = {v.name: sum(r["verdict"] is v for r in ops) for v in (EXACT, NEAR, COSTLY, OPEN)}
    most = count[COSTLY.name] > len(ops) / 2
    claim = "Most shortcuts cost measurable quality." if most else "Many shortcuts are near-exact here."
    return Finding(
        "rq3",
        claim,
        "Of {n} cache operations on {model}: near-exact {near}, costly {costly}, not separated {open}.",
        (
            ("model", model),
            ("near", count[NEAR.name]),
            ("n", len(ops)),
            ("costly", count[COSTLY.name]),
            ("open", count[OPEN.name]),
        ),
        Test(
            f"top-1 per document against {fmt(near_exact_pct)} % (sign test), keys retrieved (McNemar)",
            len(ops),
            "operations",
        ),
    )


def guide_finding(runs: dict, rows: list[dict], near_exact_pct: float) -> Finding:
    compact = compact_guide(runs, near_exact_pct)
    return Finding(
        "guide",
        "One screen prices each method on both causal models.",
        "The table holds {n} rows, one setting per method, on {models}; the full guide holds {full}.",
        (("n", len(compact)), ("models", list(compact.models)), ("full", len(rows))),
    )


def conclusions_findings(runs: dict, rows: list[dict], model: str, near_exact_pct: float) -> PageFindings:
    """The page's answer, its box (one finding per question, and the activated adapter) and sections."""
    ch1 = chapter1_findings(runs[NOTEBOOKS["01"]]["numbers"])
    ch3 = chapter3_findings(runs[NOTEBOOKS["03"]]["numbers"])
    ch5_numbers = runs[NOTEBOOKS["05"]]["numbers"]
    switch = next(iter(ch5_numbers.values()))
    dtype = runs[NOTEBOOKS["05"]]["parameters"]["dtype"]
    rq1 = next((f for f in ch1.box if f.key == "fp64_decode"), ch1.box[0])
    rq2 = next((f for f in ch3.box if f.key.startswith("new_")), ch3.box[0])
    rq3 = rq3_finding(rows, model, near_exact_pct)
    rq4, activated = exact_finding(switch, dtype), activated_finding(switch)
    answer = Finding(
        "answer",
        "The cache is free; shortcuts are priced.",
        "Caching, prefix reuse and the two adapter switches are theorems; of {n} approximations, "
        "{near} were near-exact on {model}.",
        (("n", rq3.value("n")), ("near", rq3.value("near")), ("model", model)),
    )
    g = conclusions_glue(runs)
    return PageFindings(
        answer,
        (rq1, rq2, rq3, rq4, activated),
        {
            "rq1": Section(
                rq1,
                (),
                (
                    f"{g['rq1_verdict']}.",
                    f"In fp32: {g['rq1_fp32_reason']}.",
                    f"{g['rq1_weights']}.",
                ),
            ),
            "rq2": Section(rq2, (), (f"{g['rq2_verdict']}.",), captioned(
                (ATTENTION_CAPTION, attention_table(causal_models(chapter_numbers(runs, "03")),
                                                    article()["e3_attention"])))),
            "rq3": Section(
                rq3,
                (),
                (
                    f"Which break exactness: {g['rq3_breaks']}.",
                    f"Precision: {g['rq3_precision_reason']}.",
                    f"What the exact cache buys: {g['rq3_speed_reason']}.",
                ),
            ),
            "rq4": Section(
                rq4, (activated, stale_finding(switch), knee_finding(switch))
            ),
            "guide": Section(
                guide_finding(runs, rows, near_exact_pct), (), (f"{guide_coverage(runs, rows, model)}.",)
            ),
        },
    )


def _longest_context(runs: dict) -> int:
    retrieval = runs[NOTEBOOKS["04"]]["numbers"].get("retrieval") or {}
    contexts = [
        int(c)
        for by_hay in retrieval.values()
        for hay in by_hay.values()
        if isinstance(hay, dict)
        for c in hay.get("contexts") or []
    ]
    return max(contexts, default=0)


def _own_parameters(run: dict, model: dict) -> int:
    """A model's own parameters: chapter 5 records its model with the LoRA adapters it added (their
    trainable parameters are in its training record), so those are taken off."""
    numbers = (run.get("numbers") or {}).get(model["name"])
    adapters = numbers.get("training", {}).get("adapters", {}) if isinstance(numbers, dict) else {}
    return (model.get("parameters") or 0) - sum(a.get("trainable_parameters", 0) for a in adapters.values())


THEOREM, MEASURED, NOT_SAID = "theorem: any causal model", "measured here", "not said by this book"


def serving_table(runs: dict) -> PageTable:
    """What carries over to serving: theorems, what was measured here (and on what), what the book
    cannot say; each row with what it rests on, counted from the results."""
    models = {m["name"]: {**m, "parameters": _own_parameters(run, m)}
              for run in runs.values() for m in run.get("models") or []}
    causal = [m for m in models.values() if m.get("family") == "causal"]
    largest = max(causal, key=lambda m: m["parameters"])
    size = f"{fmt(largest['parameters'] / 1e6, 3)} M parameters"
    devices = ", ".join(sorted({run.get("parameters", {}).get("device", "cpu") for run in runs.values()}))
    dtypes = ", ".join(sorted({m.get("dtype") for m in causal if m.get("dtype")}))
    context = _longest_context(runs)
    ch1, ch5 = runs[NOTEBOOKS["01"]]["numbers"], runs[NOTEBOOKS["05"]]["numbers"]
    fp64 = max((r["float64"]["decode"]["max_logit_diff"] for r in ch1.values() if "float64" in r),
               default=None)
    patch = max(r["switch"]["scores"][f"tail{k}"]["tail_patch"]["max_abs_logit_diff"]
                for r in ch5.values() for k in r["k_values"])
    prefix = max(nan_max(r["switch"]["cache_layers"][f"activated{k}"]["prefix_vs_base"])
                 for r in ch5.values() for k in r["k_values"])
    where = f"{devices}; {dtypes}; models up to {largest['name']} ({size}); contexts up to {context:,} tokens"
    rows = (
        ("exact cache and prefix reuse", THEOREM, THEOREM_RESTS,
         f"largest fp64 logit difference {fmt(fp64, 3)} (chapter 1)"),
        ("tail patch", THEOREM, "layers below the tail keep their weights and inputs",
         f"largest logit difference {fmt(patch, 3)} (chapter 5)"),
        ("activated adapter", THEOREM, "adapter weights act only from the invocation on",
         f"prefix K/V against the base cache: largest difference {fmt(prefix, 3)} (chapter 5)"),
        ("costs: time, memory, FLOPs", MEASURED, where, "chapters 4 and 5, Appendix B"),
        ("retrieval and top-1 under compression", MEASURED, where, "chapter 4"),
        ("GPU serving in bf16", NOT_SAID, f"every run here: {devices}", "—"),
        ("8B models", NOT_SAID, f"largest model here: {size}", "—"),
        ("32K-token contexts", NOT_SAID, f"longest context here: {context:,} tokens", "—"),
    )
    return rows_table({claim: {"kind": kind, "rests on": rests, "checked here": checked}
                       for claim, kind, rests, checked in rows}, index="claim")


def acceptance_shown() -> Shown:
    """The acceptance command as a displayed code block."""
    return Shown(f"```bash\n{acceptance_command()}\n```")
