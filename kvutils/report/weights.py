"""Where a model's weights come from, as a page that compares precisions says it."""
from __future__ import annotations

import re

from kvutils.models.registry import EMBEDDED, TINY

_GGUF_ORIGIN = re.compile(r"\(([^()]*GGUF[^()]*)\)")


def weights_origin(name: str) -> str:
    """Where a model's weights come from, read from the registry (kvutils.models.registry): for an embedded
    GGUF model the quantisation its file was published in ("Q4_K_M GGUF, dequantised to fp32")."""
    if name in EMBEDDED:
        found = _GGUF_ORIGIN.search(EMBEDDED[name].description)
        return (f"{name}: {found.group(1)}" if found else
                f"{name}: weights as its package ships them ({EMBEDDED[name].install})")
    if name in TINY:
        return f"{name}: random weights (seeded), not quantised"
    return f"{name}: weights as stored in its files"


def weights_note(names) -> str:
    """One sentence for a page that compares precisions: the weights every run computes with."""
    origins = [weights_origin(n) for n in dict.fromkeys(names)]
    quantised = any("GGUF" in o for o in origins)
    return ("Weights: " + "; ".join(origins)
            + (". Every precision compared here (fp64, fp32, the cache's own casts) is applied to these "
               "dequantised weights: the GGUF quantisation of the weights is part of the model, not of the "
               "cache"
               if quantised else ""))
