"""The book layer, the top one: runs the notebooks into the book's pages and makes the built site read
offline. The commands `python -m kvutils.chapters` and `python -m kvutils.browser_check` run it.

    chapters       runs the chapters with papermill (the full profile or the tests' quick one), then the
                   summary pages that read every chapter's results
    offline        Sphinx extension: MathJax from the book's own `_static/`, no thebe scripts
    plotly_static  Sphinx extension: plotly.js from `_static/`, only on the pages that hold a chart
    page           a rerun notebook as one HTML page (`python -m kvutils.book.page runs/x.ipynb`), and
                   what a reader sees of a page: its visible prose, words and sentence lengths
    browser_check  opens every built page in headless Chromium, offline, and lists what a reader would see
                   broken (console errors, missing images, cut tables, charts wider than the column)
    page_text      measures each built page's visible prose: words, sentence lengths, the findings box,
                   against the budgets of issue 50 (`python -m kvutils.book.page_text _build/html`)
"""
