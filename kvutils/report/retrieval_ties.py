"""The retrieval rows one method fills twice by construction, said beside chapter 4's retrieval
setup (as the frontier names its own ties, `kvutils.studies.cache_approximations.frontier`)."""
from __future__ import annotations

from kvutils.report.retrieval import haystacks


def head_ties(retrieval: dict, frontier: dict) -> str:
    """On a model with one KV head per layer (the frontier's `kv_heads`), AdaKV has no other head to
    move budget to and keeps what SnapKV keeps, at every level and on every prompt: " On <model>, …"
    per such model, or "" where there is none."""
    out = []
    for model, result in retrieval.items():
        if (frontier.get(model) or {}).get("kv_heads") != 1:
            continue
        levels = sorted({label.split("@")[1] for hay in haystacks(result).values() for label in hay["ops"]
                         if label.startswith("adakv@") and f"snapkv@{label.split('@')[1]}" in hay["ops"]})
        if levels:
            out.append(f"On {model}, which has one KV head per layer, AdaKV has no other head to move budget "
                       f"to: it keeps what SnapKV keeps, so its rows at {' and '.join(levels)} are SnapKV's "
                       "by construction")
    return "".join(f" {text}." for text in out)
