"""What the book found, in at most five lines for the README's opening, computed from a full build's
results files (the committed ones in tests/data/full_build/ by default) with the conclusions page's
own functions: four findings (`kvutils.report.findings`, one formatter) on exactness and speed, the
decision guide's counts, the LoRA switch and the sense probes; then the line naming the build. A
finding names a count and its best and worst; the conclusions' guide lists every operation.

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

from kvutils.core import compare
from kvutils.core.catalog import NOTEBOOKS
from kvutils.core.near_exact import NEAR_EXACT_PCT
from kvutils.core.paths import REPO_ROOT
from kvutils.report.cache_exactness import chapter1_findings
from kvutils.report.conclusions import load_chapters
from kvutils.report.conclusions_findings import rq3_finding
from kvutils.report.findings import FORMAT, Finding
from kvutils.report.guide import EXACTNESS, NEAR, chapter_numbers, decision_rows, shown, stale_test
from kvutils.report.sense_probes import depth_rates, holm_above
from kvutils.report.text import fmt

FULL_BUILD = REPO_ROOT / "tests" / "data" / "full_build"
README = REPO_ROOT / "README.md"
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


def _pct(value: float) -> str:
    """A top-1 agreement near 100 %: four digits, so that 99.98 is not shown as 100."""
    return fmt(value, 4)


def exact_finding(runs: dict) -> Finding:
    """Chapter 1's fp64 finding, and what the exact cache buys: its decode-step speed-up (the ratio of
    the medians) at the longest context timed, over the models timed (chapter 4)."""
    ch1 = chapter1_findings(runs[NOTEBOOKS["01"]]["numbers"])
    fp64 = next((f for f in ch1.box if f.key == "fp64_decode"), ch1.box[0])
    decode = chapter_numbers(runs, "04")["decode"]
    context = max(set.intersection(*({s["context"] for s in d["steps"]} for d in decode.values())))
    speedups = [s["speedup"] for d in decode.values() for s in d["steps"] if s["context"] == context]
    return Finding("exact", fp64.claim,
                   fp64.sentence + " At {context} tokens a cached decode step ran {low}–{high}× faster "
                   "({models} models).",
                   fp64.numbers + (("context", context), ("low", min(speedups)), ("high", max(speedups)),
                                   ("models", len(decode))))


def shortcuts_finding(runs: dict, rows: list[dict], model: str) -> Finding:
    """The conclusions' count of chapter 4's approximations by verdict, the near-exact one with the
    highest top-1 and the approximation with the lowest; the guide names the rest."""
    rq3 = rq3_finding(rows, model, NEAR_EXACT_PCT)
    ops = [r for r in rows if r["setting"] != EXACTNESS and r["top1"] is not None]
    near = _ops(ops, NEAR)
    best = max(near or ops, key=lambda r: r["top1"])
    worst = min(ops, key=lambda r: r["top1"])
    return Finding("shortcuts", rq3.claim,
                   "On {model}, {near} of {n} approximations kept top-1 above {line} %, best {best} "
                   "({best_top1} %); worst {worst}, {worst_top1} %. The conclusions' guide prices each.",
                   (("model", model), ("near", rq3.value("near")), ("n", rq3.value("n")),
                    ("line", NEAR_EXACT_PCT), ("best", shown(best["operation"])),
                    ("best_top1", _pct(best["top1"])), ("worst", shown(worst["operation"])),
                    ("worst_top1", worst["top1"])))


def switch_finding(runs: dict) -> Finding:
    """Chapter 5 at its deepest k: the tail patch against a full recompute, and the stale cache against
    the tail patch on held-out examples (the paired test of the conclusions' guide)."""
    model, r = next(iter(chapter_numbers(runs, "05").items()))
    k = max(r["k_values"])
    held = r["switch"]["heldout"][f"tail{k}"]
    test = stale_test(r, k)
    claim = ("A LoRA switch cannot reuse a stale cache." if test.verdict == compare.A_LOWER
             else "A LoRA switch: patching the cache is exact.")
    return Finding("switch", claim,
                   "On {model}, patching the last {k} layers matched a recompute (largest logit difference "
                   "{diff}); a stale cache scored {stale} % held-out, against {patch} % (n = {n} "
                   "documents, p = {p}).",
                   (("model", model), ("k", k),
                    ("diff", r["switch"]["scores"][f"tail{k}"]["tail_patch"]["max_abs_logit_diff"]),
                    ("patch", held["tail_patch"]["accuracy_pct"]), ("stale", held["stale"]["accuracy_pct"]),
                    ("n", test.n), ("p", test.p)))


def meaning_finding(runs: dict) -> Finding:
    """Chapter 3's sense probes on the causal models: the cached word's state, and the depths at which a
    later copy of the word carries its sense (Holm-corrected, above chance)."""
    causal = {m: r for m, r in chapter_numbers(runs, "03").items() if r.get("family", "causal") == "causal"}
    rates = {m: depth_rates(r["probe"], "new") for m, r in causal.items()}
    depths = [f"{len(holm_above(x))} of {len(x)} depths ({m})" for m, x in rates.items()]
    if all(set(r["probe"]["old_position_pct"]) == {50.0} for r in causal.values()):
        claim, sentence = ("A cached word never changes; a later copy carries its sense.",
                           "The cached word's sense probe stays at 50 %; a later copy's beats chance at "
                           "{depths}.")
    else:
        claim, sentence = ("A later copy of a word carries its sense.",
                           "A later copy's sense probe beats chance at {depths}.")
    return Finding("meaning", claim, sentence, (("depths", ", ".join(depths)),))


def findings(runs: dict) -> list[str]:
    """The README's opening lines, every number from the results: four findings and their source."""
    rows = decision_rows(runs, NEAR_EXACT_PCT)
    model = next(iter(chapter_numbers(runs, "04")["table2"]))
    commit = {str(r.get("git_commit", ""))[:7] for r in runs.values()} - {""}
    source = (f"_From the full build at {', '.join(sorted(commit))} (`tests/data/full_build`); the "
              "conclusions page has every test._")
    found = [exact_finding(runs), shortcuts_finding(runs, rows, model), switch_finding(runs),
             meaning_finding(runs)]
    lines = [FORMAT.bullet(f) for f in found] + [source]
    assert len(lines) <= MAX_LINES
    return [f"- {line}" for line in lines]  # a list: markdown would join bare lines into one paragraph


def _records(folder: Path) -> dict[str, dict]:
    """{name: record} of the gzip-compressed JSON files in `folder` ("04_retrieval", "costs", ...)."""
    return {p.name.split(".")[0]: json.loads(gzip.decompress(p.read_bytes())) for p in folder.glob("*.gz")}


def _chapter4_parts(folder: Path) -> str:
    """Chapter 4's jobs of their own, from the build's job records (jobs/<job>.json.gz): Table 2 and
    the frontier, retrieval per model, the decode timing."""
    jobs = _records(folder / "jobs")
    retrieval = " + ".join(f"{j['wall_s']:,.0f} s {name.removeprefix('retrieval-')}"
                           for name, j in sorted(jobs.items()) if name.startswith("retrieval-"))
    return (f"Table 2 and the frontier, {jobs['costs']['wall_s']:,.0f} s, retrieval, {retrieval}, and decode "
            f"timing, {jobs['timing']['wall_s']:,.0f} s, ran as jobs of their own")


def chapter_times(folder: str | Path = FULL_BUILD) -> list[str]:
    """Each chapter's compute time in the full build (its results file's wall_time_s), as a table."""
    folder = Path(folder)
    record = _records(folder)
    bench = record["bench"]

    def secs(r: dict) -> str:
        return f"{r['wall_time_s']:,.0f} s"

    lines = ["| chapter | compute time in the full build | that build's cores, torch threads, commit |",
             "|---|---|---|"]
    for number, name in NOTEBOOKS.items():
        r = record[name]
        extra = ""
        if number == "04":
            extra = f" (relating its parts; {_chapter4_parts(folder)})"
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
