"""The switch's cost alone, for `python -m kvutils.bench`: the tail patch against a full recompute
on untrained random adapters."""
from __future__ import annotations

from kvutils.core import data
from kvutils.lora.tails import lora_tail
from kvutils.models.checks import resolve
from kvutils.models.loading import load
from kvutils.studies.qwen3_switch.policies import switch_costs
from kvutils.studies.qwen3_switch.study import ModelPlan, model_config, parse_k_values


def bench(model: str = "smollm2-135m", k_values: str = "1,2,4,L", tokens: int = 256, repeats: int = 3,
          device: str = "cpu") -> dict:
    """For `python -m kvutils.bench`: the tail patch's switch time and FLOPs as a fraction of a
    full recompute, per k, on `tokens` tokens of the default corpus (untrained random adapters: the
    cost does not depend on what the adapter learned)."""
    config = model_config(model, resolve(model))
    n_layers = config.num_hidden_layers
    ks = parse_k_values(k_values, n_layers, model)
    loaded = load(model, "float32", device=device)
    ids = data.prompts_from_corpus(loaded.tokenizer, data.load_corpus(), 1, tokens, parameter="tokens")
    peft_model = loaded.model
    for k in ks:
        peft_model = lora_tail(peft_model, k, 8, 16, "q,k,v,o,mlp", random_init=True)
    peft_model = lora_tail(peft_model, ks[0], 8, 16, "q,k,v,o,mlp", adapter_name=f"activated{ks[0]}",
                           invocation_tokens=[0], random_init=True)
    mp = ModelPlan(model, config.model_type, n_layers, ks, ks[0], [0], [], [], [], 0, [], ids)
    cost = switch_costs(mp, peft_model, device, repeats)
    return {str(k): {"k_over_L": row["k_over_L"], "time_fraction": row["tail_time_fraction"],
                     "flops_fraction": row["tail_flops_fraction"],
                     "recompute_ms": 1000 * row["recompute"]["seconds"],
                     "tail_patch_ms": 1000 * row["tail_patch"]["seconds"]}
            for k, row in cost["per_k"].items()}
