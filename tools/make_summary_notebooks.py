"""Writes notebooks/06_conclusions, appendix_a_reproducibility and appendix_b_performance (committed
without outputs). Kept so the three pages' text and cells are edited in one readable place:
python tools/make_summary_notebooks.py"""
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

META = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"}}


def code(src, *tags):
    cell = new_code_cell(src.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def md(src):
    return new_markdown_cell(src.strip("\n"))


def write(name, cells):
    nb = new_notebook(cells=cells, metadata=META)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{name[:8]}-{i:02d}"
    nbformat.write(nb, f"notebooks/{name}.ipynb")


PARAMS = '''
# Parameters (papermill overrides any of these)
results_dir = "results"  # the folder holding every chapter's results file (and bench.json)
'''

conclusions = [
    md('''
# Conclusions: what the cache guarantees, and what each shortcut costs

This page answers the article's three research questions, and our fourth, from the results files
of the five chapters as they ran for this build. Every number and every verdict below is read
from those files when the page is built; the table under each question puts the article's figure
(Pythia-160M, BERT-base) beside ours, and the text after it says why they differ where they do.
'''),
    code(PARAMS + '''near_exact_pct = 99.0  # top-1 agreement (%) from which an approximation counts as near-exact in the guide
''', "parameters"),
    code('''
import pandas as pd

from kvutils import report_conclusions as rc

pd.set_option("display.max_colwidth", None)  # operation names and commands are shown whole

# Both parameters are checked here: every chapter's results must exist, and the threshold must be a percentage.
runs = rc.load_chapters(results_dir)
guide_rows = rc.decision_rows(runs, near_exact_pct)
guide_model = next(iter(runs["04_cache_approximations"]["numbers"]["table2"]))
print(f"{len(runs)} chapters; decision guide on {guide_model}: {len(guide_rows)} operations")
'''),
    code('''
from myst_nb import glue

for key, text in rc.conclusions_glue(runs).items():
    glue(f"con_{key}", text, display=False)
glue("con_guide_model", guide_model, display=False)
glue("con_near_exact", f"{near_exact_pct:g}", display=False)
''', "remove-cell"),
    md('''
## RQ1. Is the cache an exact substitute for recomputation?

{glue:text}`con_rq1_verdict`. Caching a causal model's keys and values is not an approximation
that happens to work well: as the one-line argument in the introduction shows, an entry never
depends on what comes after it, so reusing it is the same computation done once instead of many
times. What remains is rounding, because a cached step multiplies in a different order from a
full pass. In fp32 that residue is visible, and its size follows the size of the logits:
{glue:text}`con_rq1_fp32_reason`

A bidirectional encoder has no such guarantee. The same word's state moves when later text
arrives — {glue:text}`con_rq1_encoder` — so a cache of its keys and values would go stale.
'''),
    code("rc.rq1_table(runs)", "remove-input"),
    md('''
## RQ2. If cached states never change, where is a word re-interpreted?

{glue:text}`con_rq2_verdict`. The model does not revise the past; it reads it again from later
positions. A query at a new token attends over the unchanged cache, and that token's own hidden
state is where the updated meaning lives. {glue:text}`con_rq2_attention_reason`. For prompt
design this means order matters more than freshness: what a model can combine with earlier text
is decided by the later positions that read it.
'''),
    code("rc.rq2_table(runs)", "remove-input"),
    md('''
## RQ3. Which cache operations break exactness, and by how much?

Every operation that changes what is stored — lower precision, quantisation, evicting old entries,
reusing a chunk computed in another context — gives up exactness, and by very different amounts.
{glue:text}`con_rq3_precision_reason`. Evicting entries and reusing a chunk out of context are
different: they remove or misplace information rather than round it — {glue:text}`con_rq3_eviction`.
Against those costs stands what the exact cache already buys: {glue:text}`con_rq3_speed_reason`.
'''),
    code("rc.rq3_table(runs)", "remove-input"),
    md('''
## Beyond the article: switching to a LoRA adapter mid-sequence

{glue:text}`con_rq4_verdict`. An adapter confined to the last k layers leaves every entry below it
valid, so a server switching adapters needs to recompute only the tail's entries, from hidden
states it already has. Reusing the base model's tail entries (the stale cache) is an
approximation like those of RQ3 and needs the same acceptance test.
'''),
    code("rc.rq4_table(runs)", "remove-input"),
    md('''
## A decision guide

The figure sorts every operation we measured into three groups. *Exact* operations are theorems
of causal attention, confirmed by our runs to the last bit (or to rounding): adopt them as pure
savings. *Near-exact* ones kept at least {glue:text}`con_near_exact`% top-1 agreement on
{glue:text}`con_guide_model`, but that is one model on one corpus, and the same operation can cost
another model much more (compare the article's marks), so confirm on yours. The rest *cost quality* and must be measured
before they are bought. The label at each bar's end is the cache size the operation leaves, as a
share of the exact cache (chunk reuse saves compute, not memory).

To test an operation on your own model and data, run the acceptance test with the operation's
spec as it appears in the table's first column, for example:

```bash
python -m kvutils.accept --model smollm2-135m --op "quantize_kivi:bits=4,group=32,residual=128" \\
    --docs pydoc --prefill 256 --decode 256 --out accept.json
```

It prints the mean KL divergence from exact decoding (nats), top-1 agreement, perplexity and cache
bytes, for any model that `kvutils` loads (a registry key, a local folder, or a Hugging Face id
whose weights are on the machine) and any operation of the registry.
'''),
    code('''
import matplotlib.pyplot as plt

fig = rc.plot_decision_guide(guide_rows, guide_model)
plt.close(fig)
fig
''', "remove-input"),
    code("rc.decision_table(guide_rows)", "remove-input"),
]

reproducibility = [
    md('''
# Appendix A. How these pages were produced

Everything needed to reproduce the numbers in this book, read from the results files of the
build that produced these pages: which model files (by hash), which package versions, which
parameters, which commit of this repository, on which machine, and how long each chapter took.
'''),
    code(PARAMS, "parameters"),
    code('''
import pandas as pd

from kvutils import report_appendix as ra

pd.set_option("display.max_colwidth", None)  # commands and hashes are shown whole

# The one parameter is checked here: the folder must hold at least one chapter's results.
runs = ra.available_runs(results_dir)
if not runs:
    raise FileNotFoundError(f"results_dir: {results_dir} holds no chapter results; run make book first")
print(f"{len(runs)} chapters on record")
'''),
    code('''
from myst_nb import glue

for key, text in ra.reproducibility_glue(runs).items():
    glue(f"rep_{key}", text, display=False)
''', "remove-cell"),
    md('''
## Models

Each row is a model some chapter loaded. The hash is the sha256 of the published weight file the
model was converted from (the GGUF file inside its PyPI package), checked before conversion;
tiny models are random, and the column names their seed instead.
'''),
    code("ra.models_table(runs)", "remove-input"),
    md('''
## Runs: commit, machine, wall time

The {glue:text}`rep_n_chapters` chapters ran from commit(s) {glue:text}`rep_commits`
(a `+dirty` suffix means the working tree had uncommitted changes) on {glue:text}`rep_machine`.
Their wall times, which include loading models and drawing figures, add up to
{glue:text}`rep_total_min` minutes; `make book` runs the chapters in two queues side by side, so
the book's own wall time is shorter (Appendix B).
'''),
    code("ra.runs_table(runs)", "remove-input"),
    md('''
## Package versions

The versions each chapter recorded when it ran; `constraints.txt` in the repository pins every
package that `make setup` installs.
'''),
    code("ra.packages_table(runs)", "remove-input"),
    md('''
## Parameters of every chapter

The values each chapter ran with (the notebook's defaults unless overridden); any of them can be
changed with `-p name value`, and the README's table says what each one means and allows.
'''),
    code("ra.parameters_table(runs)", "remove-input"),
    md('''
## Rerunning on the article's models

The article used Pythia and BERT-base; chapter 5 was designed for Qwen3-0.6B. Their weights come
from the Hugging Face hub, which the machine that built this book cannot reach. On a machine
that has them (in the local Hugging Face cache, or a local folder given as the model), these
commands rerun a chapter on them; without the weights the notebook stops in its first cell and
says how to get them. `make chapter` also rebuilds the book; a rerun replaces only that chapter's
results file.
'''),
    code("ra.rerun_commands()", "remove-input"),
]

performance = [
    md('''
# Appendix B. Performance report

The ratios below come from one run of `python -m kvutils.bench` (`make book` runs it after the
chapters), on model {glue:text}`perf_model`, {glue:text}`perf_cores` cores and
{glue:text}`perf_threads` torch thread(s). Each ratio is of two timings taken side by side in
the same process, so the machine's speed cancels out; absolute times depend on the machine.
{glue:text}`perf_n_met` ratios that have a target meet it.
'''),
    code(PARAMS, "parameters"),
    code('''
import json
from pathlib import Path

import pandas as pd

from kvutils import report_appendix as ra

pd.set_option("display.max_colwidth", None)

# The one parameter is checked here: the benchmark's results must exist.
bench_file = Path(results_dir) / "bench.json"
if not bench_file.is_file():
    raise FileNotFoundError(f"results_dir: no bench.json in {results_dir}; run make bench (python -m kvutils.bench)")
bench = json.loads(bench_file.read_text())
runs = ra.available_runs(results_dir)
print(f"benchmark on {bench['model']} ({bench['profile']} profile)")
'''),
    code('''
from myst_nb import glue

for key, text in ra.performance_glue(bench, runs).items():
    glue(f"perf_{key}", text, display=False)
''', "remove-cell"),
    code("ra.performance_table(bench)", "remove-input"),
    code('''
import matplotlib.pyplot as plt

fig = ra.plot_performance(bench)
plt.close(fig)
fig
''', "remove-input"),
    md('''
## Wall time of `make book`

Set-up (virtual environment, packages, embedded models and their one-time conversion), every
chapter on the full profile and the benchmark took {glue:text}`perf_total_min` minutes together,
{glue:text}`perf_within` the {glue:text}`perf_target_min`-minute target; rendering the HTML adds
about a minute. `make book` runs the chapters in two queues side by side, one core and one torch
thread each, so those chapters count once, by the queues' wall time; the benchmark then runs
alone on every core, so its ratios are not disturbed by a chapter.
'''),
    code("ra.book_times_table(bench, runs)", "remove-input"),
]

write("06_conclusions", conclusions)
write("appendix_a_reproducibility", reproducibility)
write("appendix_b_performance", performance)
