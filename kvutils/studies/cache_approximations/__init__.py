"""Chapter 4: what the cache buys (one decode step with and without it), what it costs (bytes per
token), and what each approximation costs (Table 2, the frontier).

study     the plan and the run: timing, bytes, Table 2
frontier  the deployed methods at matched cache sizes on long prefills, with paired verdicts
"""
