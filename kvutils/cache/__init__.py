"""cache: the KV-cache operations (exact, lower precision, quantisation, eviction, out-of-context
reuse), how a model is scored with each, and what each costs in bytes and time.

registry      the operations, in order (OPS, register, parse_op("window:size=128,sinks=4")), and the
              lists derived from their classes: the frontier's methods, the retrieval test's
base          CacheOp, what every operation shares (its checks, what the pages show of it, the quantisers)
methods/      one operation per file (kvpress style: a small dataclass whose fields are its settings;
              its class states its reader's name, colour, place, frontier and retrieval settings)
prefilled     what a prefill leaves behind (Prefilled, LayerView: what a data-dependent method reads)
forward       one forward with an explicit mask over every version of every entry
scoring       teacher-forced scoring with a modified cache: which path an operation takes
fast_path     all decoded tokens in one forward
step_path     one token per forward, one document
step_batched  one token per forward, several documents at once (presses, policies, cache objects)
sizes         every byte count: formulas per token and per configuration, and bytes actually held
costs         compute and time of a decode step, memory bandwidth
accept        the acceptance test (`python -m kvutils.accept`): KL, top-1 and perplexity against the exact
cache
accept_args   its command line's arguments, each checked before torch loads (a task registry: score)
"""
