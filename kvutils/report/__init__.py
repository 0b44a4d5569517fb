"""The report layer: what the book's pages show, built from the results files the studies write
(never from a model): tables beside the article's figures, static and interactive charts, and the
texts the prose glues in, each finding worded as its numbers say. A page's numbers come through
`kvutils.core.records`, checked against the results file's format. It reads the layers below
(`studies` for a few constants and verdicts); `explorer` and `book` build on it.

Shared by every page:
    findings              findings as data (claim, numbers, test) and the one formatter that shows them: the
                          findings box, a section's point, its Evidence block, a table row (chapters 1-3)
    text                  numbers as the book prints them (`fmt`, `fraction`), bold key numbers for {glue:md}
                          (chapters 4, 5 and the conclusions, until they move to `findings`)
    figures               the figure style and the checks that a figure reads at the column's width
    tables                tables for the page, whose labels and cells wrap at the column's width
    weights               where a model's weights come from (GGUF quantisation, random, as stored)
    timing                timings with their repeats and spread; speed-ups against a published one
    interactive           Plotly charts that draw offline in the static book (`scatter`, `Chart`)

One module per page, named after its notebook (and study):
    cache_exactness       chapter 1: cache vs no cache, per step and per layer (E1, E2)
    bert_contrast         chapter 2: the same word in two contexts, causal models against an encoder
    sense_probes          chapter 3: sense probes at the cached and a new position, and where attention goes
    cache_approximations  chapter 4: decode-step cost, bytes per token and the approximation table (Table 2)
    chapter4_findings     chapter 4's findings as data: the answer, the box and each section's point
    chapter4_tables       chapter 4's verdict tables: retrieval, the frontier against random, Kendall's τ
    chapter4_verdicts     chapter 4's verdict rules: the retrieval margin, one procedure, τ counting once
    frontier              chapter 4's frontier: quality against bytes held for the methods people deploy
    qwen3_switch          chapter 5: switching to a LoRA tail, its figures and tables
    switch_verdicts       chapter 5's comparative clauses, each from a paired test
    switch_evidence       chapter 5's Evidence blocks: settings, measures, per-example tests, cost, as tables
    conclusions           the conclusions page: the article's research questions answered from every chapter
    guide                 the conclusions' decision guide: every scored cache operation, each colour from a
test
    appendix              appendix A (how the pages were produced) and B (the benchmark, from bench.json)
"""
