"""Chapter 5: switching to a LoRA adapter mid-sequence.

study      the plan: every parameter checked, examples built, before any model loads
tasks      the two tasks (word senses, continuation) as examples
train      training the adapters, accuracy
policies   the switch policies (recompute, reuse, tail patch) compared
verdicts   paired tests of the policies and the knee
exactness  what must hold exactly, checked
curve      the quality-vs-cost curve, kept in the results
run        the chapter's run
bench      the switch's cost alone, for the benchmark
"""
