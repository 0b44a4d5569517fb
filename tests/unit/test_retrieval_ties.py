"""Chapter 4's retrieval rows that are one method twice by construction are said so, and only
where the model's shape makes them so (read off a full build's results, tests/data/full_build)."""
import gzip
import json
from pathlib import Path

from kvutils.report.retrieval_ties import head_ties

FULL_BUILD = Path(__file__).parents[1] / "data" / "full_build" / "04_cache_approximations.json.gz"


def test_adakv_is_named_snapkvs_twin_only_on_a_model_with_one_kv_head():
    numbers = json.loads(gzip.decompress(FULL_BUILD.read_bytes()))["numbers"]
    retrieval, frontier = numbers["retrieval"], numbers["frontier"]
    one_head = [m for m in retrieval if frontier[m]["kv_heads"] == 1]
    assert one_head and len(one_head) < len(retrieval)  # Gemma 3 (1 KV head) and SmolLM2 (3)
    text = head_ties(retrieval, frontier)
    for model in retrieval:
        assert (f"On {model}, which has one KV head per layer" in text) == (model in one_head)
    for model in one_head:  # what the sentence claims holds in the records: the same answer on every prompt
        for hay in ("pydoc", "filler"):
            ops = retrieval[model][hay]["ops"]
            for level in ("0.25", "0.5"):
                for regime in ("agnostic", "aware"):
                    assert ops[f"adakv@{level}"][regime]["per_prompt"] == ops[f"snapkv@{level}"][regime]["per_prompt"]
    assert head_ties(retrieval, {}) == "" and head_ties({}, frontier) == ""
