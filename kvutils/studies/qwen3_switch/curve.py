"""Chapter 5's quality-vs-cost curve, computed from a model's numbers and kept in its results."""
from __future__ import annotations


def curve_rows(r: dict) -> list[dict]:
    """The quality-vs-cost curve of one model as tidy rows: per k and policy, the held-out accuracy
    with its 95 % interval and what the switch costs (FLOPs and time as a fraction of a full
    recompute, extra memory per prefix token). The chapter's chart plots them; they are kept in the results
    for other charts."""
    rows = []
    held, cost = r["switch"]["heldout"], r["cost"]
    for k in r["k_values"]:
        c = cost["per_k"][str(k)]
        for policy, adapter in (("tail_patch", f"tail{k}"), ("stale", f"tail{k}"), ("activated",
                                                                                    f"activated{k}")):
            a = held[adapter][policy]
            spent = c["tail_patch"] if policy == "tail_patch" else (
                cost["activated"] if policy == "activated" else c["stale"])
            rows.append({"k": k, "k_over_L": k / r["layers"], "policy": policy,
                         "accuracy_pct": a["accuracy_pct"],
                         "balanced_accuracy_pct": a["balanced_accuracy_pct"], "auc": a["auc"],
                         "ci95_low_pct": a["ci95_pct"][0], "ci95_high_pct": a["ci95_pct"][1], "n": a["n"],
                         "switch_flops_fraction": spent["flops"] / c["recompute"]["flops"],
                         "switch_time_fraction": spent["seconds"] / c["recompute"]["seconds"],
                         "extra_bytes_per_token": spent["extra_bytes"] // cost["prefix_tokens"]})
    return rows
