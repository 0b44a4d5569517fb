"""The book's near-exact line, named once and importable without scipy or torch (the acceptance
test checks `--threshold` against it before anything heavy loads).

An approximation of the exact cache is "near-exact" where its top-1 agreement with the exact cache,
per document, is tested above this line; "costly" where it is tested below (kvutils.core.compare's
paired rule: a 95 % interval and an exact sign test). The conclusions' `near_exact_pct` and
`python -m kvutils.accept --threshold` default to it."""

NEAR_EXACT_PCT = 99.0  # top-1 agreement with the exact cache, in %
