"""The guide a serving engineer reads in a minute (issue 50, item 4): one compact table, rows grouped by
family, both causal models side by side, each row's acceptance-test spec as text; and a flowchart from
what the cache stores to what it costs, drawn offline with matplotlib. The full guide
(`kvutils.report.guide.decision_table`) stays below it, collapsed (`Collapsed`)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from kvutils.core import compare
from kvutils.report.figures import styled
from kvutils.report.guide import COSTLY, EXACT, NEAR, OPEN, decision_rows
from kvutils.report.names import human
from kvutils.report.text import fmt

MARK = {EXACT.name: "=", NEAR.name: "✓", COSTLY.name: "✗", OPEN.name: "?"}
MARKS_TEXT = (
    "= exact (a theorem, checked to rounding); ✓ near-exact here (tested above the threshold); "
    "✗ costs quality (tested below it, or a retrieval loss); ? not separated at this n."
)
CHAPTER5 = ("LoRA switch, tail patch", "LoRA switch, activated adapter", "LoRA switch, stale cache")
# (family, spec) in the order the table shows them: one setting per method, eviction at about half the cache
FAMILIES = (
    ("precision", ("cast:dtype=float16", "cast:dtype=bfloat16", "hf_quantized:backend=fp8")),
    (
        "quantisation",
        (
            "quantize_naive:bits=8",
            "quantize_naive:bits=4",
            "quantize_kivi:bits=8,group=32,residual=128",
            "quantize_kivi:bits=4,group=32,residual=128",
            "quantize_kivi:bits=2,group=32,residual=128",
        ),
    ),
    (
        "eviction, about half",
        (
            "random:compression_ratio=0.5,seed=0",
            "knorm:compression_ratio=0.5",
            "snapkv:compression_ratio=0.5,window=64,kernel=5",
            "expected_attention:compression_ratio=0.5,future=512,sinks=4",
            "pyramidkv:compression_ratio=0.5,window=64,kernel=5,beta=20",
            "adakv:compression_ratio=0.5,window=64,kernel=5,safeguard=0.2",
            "h2o:compression_ratio=0.46875,recent=0.5",
            "tova:compression_ratio=0.46875",
            "window:size=544,sinks=4,reindex=false",
        ),
    ),
    (
        "chunk reuse",
        ("chunk_reuse:positions=reindexed,chunk=128", "chunk_blend:recompute_fraction=0.15,chunk=128"),
    ),
)
MAX_ROWS = 25  # one screen at 1280 px


@dataclass(frozen=True)
class GuideRow:
    """One row of the compact guide: its family, name, spec (what `--op` takes, or the chapter that
    measured it), memory against a bf16 cache, and per model the top-1 cell and the retrieval cell."""

    family: str
    name: str
    spec: str
    memory: str
    top1: tuple[str, ...]
    retrieval: tuple[str, ...]
    time: str
    followup: tuple[str, ...] = ()  # per model: keys on follow-up questions through the prompt cache


def _top1(r: dict | None) -> str:
    if r is None:
        return "not run"
    if r["top1"] is None:
        return f"K/V equal {MARK[r['verdict'].name]}"
    ci = f" [{fmt(r['top1_ci'][0], 3)}–{fmt(r['top1_ci'][1], 3)}]" if r["top1_ci"] else ""
    return f"{fmt(r['top1'], 3)}{ci} {MARK[r['verdict'].name]}"


def _retrieval(r: dict | None, haystack: str = "pydoc") -> str:
    axis = ((r or {}).get("retrieval") or {}).get(haystack)
    if not axis:
        return "—"
    aware, agnostic = axis["aware"], axis["agnostic"]
    mark = "✗" if aware["lost"] or agnostic["lost"] else "✓"
    return f"{aware['accuracy_pct']:.0f} / {agnostic['accuracy_pct']:.0f} {mark}"


def _followup(r: dict | None, haystack: str = "pydoc") -> str:
    """Keys retrieved on the follow-up questions through the prompt cache (compressed before any
    question), ✗ where detectably below the exact cache's own follow-ups."""
    axis = ((r or {}).get("retrieval") or {}).get(haystack)
    f = axis and axis["agnostic"].get("followup")
    if not f:
        return "—"
    mark = "✗" if f["against_exact"] == compare.A_LOWER else "✓"
    return f"{f['accuracy_pct']:.0f} {mark}"


STORED_SMALLER = (
    "cast",
    "quantize_naive",
    "quantize_kivi",
    "hf_quantized",
)  # a new precision, every entry kept


def _memory(r: dict) -> str:
    """Bytes against a bf16 cache of the same model: a precision's own bytes; an eviction keeps its share
    of the entries at whatever precision the server stores."""
    if r["operation"].split(":")[0] in STORED_SMALLER and r.get("bytes_bf16_pct") is not None:
        return f"{fmt(r['bytes_bf16_pct'], 3)} %"
    return f"{fmt(r['bytes_pct'], 3)} %"


def _time(r: dict) -> str:
    if r.get("switch_cost") is not None:
        return "0 at the switch" if r["switch_cost"] == 0 else f"{fmt(r['switch_cost'], 2)} of a prefill"
    ratios = r.get("time_ratio")
    return f"{fmt(sorted(ratios)[len(ratios) // 2], 3)}×" if ratios else "—"


def compact_rows(runs: dict, models: list[str], near_exact_pct: float) -> list[GuideRow]:
    """The compact guide's rows for `models` (the first: the model whose theorem rows and times are shown)."""
    by_model = [{r["operation"]: r for r in decision_rows(runs, near_exact_pct, m)} for m in models]
    first = by_model[0]
    rows = []
    for op, r in first.items():
        if op.endswith("(ch. 1)") or op.startswith(CHAPTER5):
            name, detail = op.rstrip(")").rsplit(" (ch. ", 1)
            chapter, _, where = detail.partition(", ")
            held = r.get("held")
            top1 = _top1(r) + (f"; accuracy {fmt(held[0], 3)} %, AUC {fmt(held[1], 3)}" if held else "")
            rows.append(
                GuideRow(
                    "theorems (any causal model)" if r["verdict"] is EXACT else "LoRA switch",
                    f"{name} ({where or 'every chapter-1 model'})",
                    f"chapter {chapter}",
                    _memory(r),
                    (top1,) + ("—",) * (len(models) - 1),
                    ("—",) * len(models),
                    _time(r),
                )
            )
    for family, specs in FAMILIES:
        for spec in specs:
            found = [m.get(spec) for m in by_model]
            if not any(found):
                continue
            shown = next(f for f in found if f)
            rows.append(
                GuideRow(
                    family,
                    human(spec),
                    spec,
                    _memory(shown),
                    tuple(_top1(f) for f in found),
                    tuple(_retrieval(f) for f in found),
                    _time(found[0] or shown),
                    tuple(_followup(f) for f in found),
                )
            )
    if len(rows) > MAX_ROWS:
        raise ValueError(f"compact guide: {len(rows)} rows, more than one screen ({MAX_ROWS})")
    return rows


@dataclass(frozen=True)
class CompactGuide:
    """The compact guide as a page shows it: an HTML table with its caption (the marks said once)."""

    rows: tuple[GuideRow, ...]
    models: tuple[str, ...]
    caption: str

    def _repr_html_(self) -> str:
        head = ["family", "method and its <code>--op</code> spec", "memory vs bf16"]
        head += [f"top-1 % [95 % CI], {html.escape(m)}" for m in self.models]
        head += [f"keys % with / before the question, {html.escape(m)}" for m in self.models]
        follow = any(c != "—" for r in self.rows for c in r.followup)
        if follow:
            head += [f"keys % on a follow-up question ({' / '.join(map(html.escape, self.models))})"]
        head += ["time"]
        out = [
            '<table class="compact-guide" style="font-size:0.8em">',
            f"<caption>{html.escape(self.caption)}</caption><thead><tr>"
            + "".join(f"<th>{h}</th>" for h in head)
            + "</tr></thead><tbody>",
        ]
        family = None
        for r in self.rows:
            first = r.family != family
            family = r.family
            cells = [
                html.escape(r.family) if first else "",
                f"{html.escape(r.name)}<br><code style=\"word-break:break-all\">{html.escape(r.spec)}</code>",
                html.escape(r.memory),
            ]
            cells += [html.escape(c) for c in r.top1 + r.retrieval]
            cells += [html.escape(" / ".join(r.followup or ("—",) * len(self.models)))] if follow else []
            cells += [html.escape(r.time)]
            out.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        return "\n".join(out + ["</tbody></table>"])

    def __len__(self) -> int:
        return len(self.rows)


def compact_guide(runs: dict, near_exact_pct: float) -> CompactGuide:
    ch4 = runs["04_cache_approximations"]["numbers"]
    models = list(dict.fromkeys([*ch4["table2"], *ch4.get("frontier", {})]))
    rows = compact_rows(runs, models, near_exact_pct)
    caption = (
        f"Top-1: agreement with exact decoding, 95 % interval over documents, sign test against "
        f"{fmt(near_exact_pct)} %; Table 2's setting where it ran, else the frontier's. "
        "Keys: a 7-digit key hidden "
        "in pydoc haystacks, McNemar against the exact cache; a follow-up asks another key through the cache "
        "compressed before the first question (the prompt cache), against the exact cache's follow-ups. "
        "Time: scoring over the exact decode (median). "
        "Memory: bytes against a bf16 cache of the same model. Chapter 5's rows: top-1 against the "
        f"recompute, held-out accuracy and AUC. {MARKS_TEXT}"
    )
    return CompactGuide(tuple(rows), tuple(models), caption)


@dataclass(frozen=True)
class Collapsed:
    """Any displayed object inside a collapsed block ("Evidence: …"), in the book and in a rerun."""

    title: str
    inner: object

    def _repr_html_(self) -> str:
        inner = (
            self.inner._repr_html_() if hasattr(self.inner, "_repr_html_") else html.escape(str(self.inner))
        )
        if hasattr(self.inner, "savefig"):  # a matplotlib figure
            inner = Picture(self.inner, self.title)._repr_html_()
        return (
            f'<details class="sd-sphinx-override sd-dropdown sd-card sd-mb-3 evidence">'
            f'<summary class="sd-summary-title sd-card-header">{html.escape(self.title)}</summary>'
            f'<div class="sd-summary-content sd-card-body">{inner}</div></details>'
        )


@dataclass(frozen=True)
class Picture:
    """A matplotlib figure as an <img> with its alt text (what the figure shows, not its file name)."""

    figure: object
    alt: str

    def _repr_html_(self) -> str:
        import base64
        import io

        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
        data = base64.b64encode(buffer.getvalue()).decode()
        return (
            f'<img src="data:image/png;base64,{data}" alt="{html.escape(self.alt)}" style="max-width:100%">'
        )


# the flowchart: (box text, x, y) and the arrows between boxes, with a label on each
FLOW_BOXES = {
    "start": ("What does the cache store?", 0.5, 0.92),
    "exact": ("Every key and value,\nat the model's precision", 0.15, 0.68),
    "less": ("Every entry,\nin fewer bits", 0.5, 0.68),
    "fewer": ("Fewer entries", 0.85, 0.68),
    "switch": ("The same entries,\nthen an adapter", 0.15, 0.40),
    "free": (
        "Free by theorem:\nexact cache, prefix reuse,\ntail patch, activated adapter\n"
        "(saves compute, not memory)",
        0.15,
        0.12,
    ),
    "precision": (
        "Rounding error:\ntest top-1 and keys\n(table: precision, quantisation)\nsaves memory: bits / 16",
        0.5,
        0.35,
    ),
    "evict": (
        "Information removed:\ntest top-1 and keys\n(table: eviction, chunk reuse)\n"
        "saves memory: share evicted",
        0.85,
        0.35,
    ),
    "accept": ("What it costs on your model:\npython -m kvutils.accept", 0.5, 0.08),
}
FLOW_ARROWS = (
    ("start", "exact", ""),
    ("start", "less", ""),
    ("start", "fewer", ""),
    ("exact", "switch", "then"),
    ("switch", "free", "tail or aLoRA"),
    ("less", "precision", ""),
    ("fewer", "evict", ""),
    ("precision", "accept", ""),
    ("evict", "accept", ""),
)


@styled
def plot_flowchart():
    """From what the cache stores to what it costs: boxes and arrows, drawn offline (no network)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5.6))
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    colours = {"free": "#2a9d8f", "precision": "#e9c46a", "evict": "#e76f51", "accept": "#dddddd"}
    for key, (text, x, y) in FLOW_BOXES.items():
        ax.text(
            x,
            y,
            text,
            ha="center",
            va="center",
            fontsize=9,
            zorder=3,
            bbox=dict(boxstyle="round,pad=0.4", facecolor=colours.get(key, "white"), edgecolor="black"),
        )
    for a, b, label in FLOW_ARROWS:
        (_, x0, y0), (_, x1, y1) = FLOW_BOXES[a], FLOW_BOXES[b]
        ax.annotate(
            "",
            xy=(x1, y1 + 0.07),
            xytext=(x0, y0 - 0.06),
            arrowprops=dict(arrowstyle="->", color="black", shrinkA=2, shrinkB=2),
            zorder=2,
        )
        if label:
            ax.text((x0 + x1) / 2 + 0.02, (y0 + y1) / 2, label, fontsize=8, style="italic")
    ax.set_title(
        "Decision flow: what the cache stores decides what it costs\n"
        "(SmolLM2-135M and Gemma 3 270M, chapters 1, 4 and 5)"
    )
    fig.tight_layout()
    return fig
