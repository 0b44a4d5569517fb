"""studies: each chapter's computation, named after its notebook, writing the numbers its results
file holds (the pages in kvutils.report only read them).

parameters            every notebook parameter, declared once per chapter
cache_exactness       chapter 1: cached and uncached decoding compared token by token and logit by logit
sense_probes/         chapters 2 and 3: a word's cached state in a causal model vs a bidirectional encoder;
probes
cache_approximations/ chapter 4: what the cache buys and costs, Table 2, the bytes-vs-fidelity frontier
qwen3_switch/         chapter 5: switching to a LoRA adapter mid-sequence, what stays exact, what it costs
performance           appendix B's benchmark (`python -m kvutils.bench`)
bench_args            its arguments and earlier records, checked before torch loads
"""
