"""What the book found, in at most five lines for the README's opening, computed from a full build's
results files (the committed ones in tests/data/full_build/ by default) with the conclusions page's
own functions: the decision guide's verdicts, the speed-up, the LoRA switch and the sense probes.

    python -m kvutils.report.readme_findings            # print the lines
    python -m kvutils.report.readme_findings --write    # replace the README's block between the markers

tests/unit/test_readme_findings.py checks that the README's block is what this renders."""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.paths import REPO_ROOT
from kvutils.report.conclusions import load_chapters, stale_against_tail
from kvutils.report.guide import COSTLY, EXACT, NEAR, OPEN, chapter_numbers, decision_rows, shown
from kvutils.report.sense_probes import depth_rates, holm_above
from kvutils.report.text import fmt
from kvutils.report.timing import speedup_text

FULL_BUILD = REPO_ROOT / "tests" / "data" / "full_build"
README = REPO_ROOT / "README.md"
NEAR_EXACT_PCT = 99.0  # the book's near-exact line (the conclusions' decision guide)
MAX_LINES = 5


def load_full_build(folder: str | Path = FULL_BUILD) -> dict[str, dict]:
    """Every chapter's results from a folder of `<name>.json.gz` (or plain `.json`) files."""
    folder = Path(folder)
    with tempfile.TemporaryDirectory() as tmp:
        for name in NOTEBOOKS.values():
            packed = folder / f"{name}.json.gz"
            plain = folder / f"{name}.json"
            data = gzip.decompress(packed.read_bytes()) if packed.is_file() else plain.read_bytes()
            (Path(tmp) / f"{name}.json").write_bytes(data)
        return load_chapters(tmp)


def _ops(rows: list[dict], verdict) -> list[dict]:
    return [r for r in rows if r["verdict"] is verdict]


def _top1(r: dict) -> str:
    ci = f" [{fmt(r['top1_ci'][0], 4)}, {fmt(r['top1_ci'][1], 4)}]" if r["top1_ci"] else ""
    return f"{shown(r['operation'])} {fmt(r['top1'], 4)} %{ci}"


def exact_line(runs: dict, rows: list[dict]) -> str:
    """What is exact (chapters 1 and 5: theorems, within the rounding tolerance) and what the exact
    cache buys: its decode-step speed-up at the longest context timed (chapter 4)."""
    ch1 = chapter_numbers(runs, "01")
    fp64 = [r["float64"]["decode"] for r in ch1.values() if "float64" in r]
    worst = (f"fp64 largest |logit difference| {fmt(max(d['max_logit_diff'] for d in fp64), 3)}" if fp64
             else "no fp64 run")
    exact = "; ".join(f"{r['operation']}, n = {r['n']}" for r in _ops(rows, EXACT)) or "nothing"
    decode = chapter_numbers(runs, "04")["decode"]
    longest = {m: max(d["steps"], key=lambda s: s["context"]) for m, d in decode.items()}
    speed = "; ".join(f"{m}, {s['context']} tokens: {speedup_text(s)}" for m, s in longest.items())
    return (f"**Free, exact to rounding** ({worst} on {', '.join(ch1)}): {exact}. "
            f"The exact cache's decode-step speed-up: {speed}.")


def near_line(rows: list[dict], model: str) -> str:
    """The operations whose top-1 agreement a paired test over documents puts above the near-exact line."""
    near = _ops(rows, NEAR)
    return (f"**Near-exact** (top-1 agreement above {fmt(NEAR_EXACT_PCT)} %, paired over documents, 95 % "
            f"interval, {model}): {len(near)} of {len(rows)} operations: "
            + ("; ".join(f"{_top1(r)}, n = {r['n']}, {fmt(r['bytes_pct'], 3)} % of the fp32 cache's bytes"
                         for r in near) or "none") + ".")


def costly_line(runs: dict, rows: list[dict], model: str) -> str:
    """The operations tested below the line or losing retrieval keys (every setting of a method, named
    where all its settings are), and chapter 5's stale cache."""
    costly = _ops(rows, COSTLY)
    ops = [r for r in costly if ":" in r["operation"]]
    below = [r for r in ops if r["test"].startswith("below")]  # the rest: costly by a retrieval loss alone
    methods = {r["operation"].split(":")[0] for r in rows if ":" in r["operation"]}
    whole = sorted(m for m in methods if all(r in ops for r in rows if r["operation"].split(":")[0] == m))
    text = (f"**Costly** ({model}): {len(ops)} of {len(rows)} operations, {len(below)} tested below "
            f"{fmt(NEAR_EXACT_PCT)} % top-1, the other {len(ops) - len(below)} losing keys in long-range "
            "retrieval; every setting of " + ", ".join(f"`{m}`" for m in whole))
    for m, r in chapter_numbers(runs, "05").items():
        k = max(r["k_values"])
        text += f". The stale cache after a LoRA switch ({m}), held-out accuracy: {stale_against_tail(r, k)}"
    return text + "."


def open_line(rows: list[dict], runs: dict) -> str:
    """What the tests did not separate from the line, and where the meaning goes (chapter 3)."""
    unsure = _ops(rows, OPEN)
    text = (f"**Not separated** from {fmt(NEAR_EXACT_PCT)} %: "
            + ("; ".join(f"{_top1(r)}, n = {r['n']}" for r in unsure) or "none") + ".")
    causal = {m: r for m, r in chapter_numbers(runs, "03").items() if r.get("family", "causal") == "causal"}
    parts = []
    for m, r in causal.items():
        rates = depth_rates(r["probe"], "new")
        parts.append(f"{m} at {len(holm_above(rates))} of {len(rates)} depths")
    if parts:
        at_chance = all(set(r["probe"]["old_position_pct"]) == {50.0} for r in causal.values())
        text += (" **Where the meaning goes:** "
                 + ("a cached word's state never changes (its sense probe sits at 50 % at every depth); "
                    if at_chance else "")
                 + "a later copy of the word carries the sense, above chance (Holm-corrected) on "
                 + ", ".join(parts) + ".")
    return text


def findings(runs: dict) -> list[str]:
    """The README's opening lines, every number from the results."""
    rows = decision_rows(runs, NEAR_EXACT_PCT)
    model = next(iter(chapter_numbers(runs, "04")["table2"]))
    commit = {str(r.get("git_commit", ""))[:7] for r in runs.values()} - {""}
    source = (f"_From the full build at {', '.join(sorted(commit))} (`tests/data/full_build`); the "
              "conclusions page has every test._")
    lines = [exact_line(runs, rows), near_line(rows, model), costly_line(runs, rows, model),
             open_line(rows, runs), source]
    assert len(lines) <= MAX_LINES
    return [f"- {line}" for line in lines]  # a list: markdown would join bare lines into one paragraph


def chapter_times(folder: str | Path = FULL_BUILD) -> list[str]:
    """Each chapter's compute time in the full build (its results file's wall_time_s), as a table."""
    folder = Path(folder)
    record = {p.name.split(".")[0]: json.loads(gzip.decompress(p.read_bytes())) for p in folder.glob("*.gz")}
    bench = record["bench"]

    def secs(r: dict) -> str:
        return f"{r['wall_time_s']:,.0f} s"

    lines = ["| chapter | compute time in the full build | that build's cores, torch threads, commit |",
             "|---|---|---|"]
    for number, name in NOTEBOOKS.items():
        r = record[name]
        extra = ""
        if number == "04":
            extra = (f" (its long-range retrieval, {secs(record['04_retrieval'])}, and decode timing, "
                     f"{secs(record['04_decode_timing'])}, ran as jobs of their own)")
        lines.append(f"| `make chapter N={number}` ({name}) | {secs(r)}{extra} | "
                     f"{r['machine']['cores']}, {r['machine']['torch_threads']}, {r['git_commit'][:7]} |")
    lines.append(f"| `make bench` | {secs(bench)} | {bench['machine']['cores']}, "
                 f"{bench['machine']['torch_threads']}, alone |")
    return lines


BLOCKS = {"findings": lambda folder: findings(load_full_build(folder)), "chapter-times": chapter_times}


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}: python -m kvutils.report.readme_findings --write -->", f"<!-- /{name} -->"


def render(name: str = "findings", folder: str | Path = FULL_BUILD) -> str:
    """One README block, markers included."""
    begin, end = markers(name)
    return "\n".join([begin, *BLOCKS[name](folder), end])


def replace_block(readme: str, name: str, block: str) -> str:
    """The README's text with one block replaced; an error if its markers are not there once each."""
    begin, end = markers(name)
    if readme.count(begin) != 1 or readme.count(end) != 1 or readme.index(begin) > readme.index(end):
        raise ValueError(f"README: needs one {begin!r} line and one {end!r} line after it")
    head, rest = readme.split(begin)
    return head + block + rest.split(end, 1)[1]


def readme_block(readme: str, name: str = "findings") -> str:
    """One block of a README's text, markers included."""
    begin, end = markers(name)
    start = readme.index(begin)
    return readme[start:readme.index(end) + len(end)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvutils.report.readme_findings", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", default=str(FULL_BUILD), help="folder of the full build's results files")
    parser.add_argument("--write", action="store_true", help=f"rewrite the block in {README.name}")
    args = parser.parse_args(argv)
    blocks = {name: render(name, args.results) for name in BLOCKS}
    if not args.write:
        print("\n\n".join(blocks.values()))
        return 0
    text = README.read_text(encoding="utf-8")
    new = text
    for name, block in blocks.items():
        new = replace_block(new, name, block)
    if new != text:
        tmp = README.with_suffix(".md.tmp")
        tmp.write_text(new, encoding="utf-8")
        tmp.replace(README)
    print(f"{README}: findings and chapter times {'rewritten' if new != text else 'already current'}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
