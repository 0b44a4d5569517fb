"""Chapter 5's identities, asserted on a run's numbers: what holds by construction must hold in
the measurements, and a NaN anywhere fails."""
from __future__ import annotations

from kvutils.lora.switching import nan_max
from kvutils.studies.qwen3_switch.study import TOLERANCE


def _within(value, tol: float) -> bool:
    """value <= tol, False for NaN (a NaN compares False with everything, so `NaN > tol` would pass)."""
    return value is not None and value <= tol


def check_exactness(numbers: dict, dtype: str) -> None:
    """The chapter's theorems, asserted on the run's numbers, failing on NaN: tail patch ==
    recompute within the dtype's tolerance; stale reuse exact below the tail and off inside it; each
    activated adapter's prefix K/V identical to the base's; in the patch map, the shared prefix's
    entries bit-identical although each context was computed in its own forward pass, so copying
    them moves the answer only by the rounding of a batch row."""
    tol, problems = TOLERANCE[dtype], []
    for model, r in numbers.items():
        for k in r["k_values"]:
            adapter = f"tail{k}"
            layers = r["switch"]["cache_layers"][adapter]
            patch_kv = nan_max(layers["tail_patch"])
            patch_gap = r["switch"]["scores"][adapter]["tail_patch"]["max_abs_logit_diff"]
            if not (_within(patch_kv, tol) and _within(patch_gap, tol)):
                problems.append(f"{model} k={k}: tail patch off the recompute by {patch_kv} (K/V), "
                                f"{patch_gap} (logits); allowed {tol}")
            first = r["first_changed_layer"][str(k)]
            if not all(d == 0 for d in layers["stale"][:r["layers"] - k]):
                problems.append(f"{model} k={k}: stale cache differs below the tail: {layers['stale']}")
            if not all(d is not None and d > 0 for d in layers["stale"][first:]):
                problems.append(f"{model} k={k}: stale cache equals the recompute inside the tail: "
                                f"{layers['stale']}")
            prefix = r["switch"]["cache_layers"][f"activated{k}"]["prefix_vs_base"]
            if not all(d is None or d == 0 for d in prefix) or all(d is None for d in prefix):
                problems.append(f"{model} k={k}: the activated adapter changed the prefix's K/V: {prefix}")
        patch = r["patching"]
        # the control copies bit-identical entries; the answer may still move by rounding, because a
        # batched forward need not round every batch row the same way on multi-threaded CPUs
        if not (patch["prefix_kv_max_diff"] == 0 and _within(patch["control_max_abs_delta"], tol)):
            problems.append(f"{model}: patching the shared prefix moved the answer by "
                            f"{patch['control_max_abs_delta']} (its entries differ by "
                            f"{patch['prefix_kv_max_diff']})")
    if problems:
        raise AssertionError("chapter 5 identities failed:\n  " + "\n  ".join(problems))
