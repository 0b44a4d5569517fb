"""Chapter 5's parameters (notebooks/05_qwen3_switch.ipynb): LoRA tails that switch a model's mode
after a marker, and what their cache costs."""
from __future__ import annotations

from dataclasses import dataclass

from kvutils.core.declared import Declared, param
from kvutils.lora.schedule import LOSSES, SCHEDULES
from kvutils.models.checks import DTYPES
from kvutils.studies.parameters.shared import chapter_results_dir, torch_device
from kvutils.studies.parameters.values import (
    MAX_STEPS,
    STEPS_WHY,
    at_least,
    even_count,
    grad_norm,
    k_items,
    layers,
    lora_alpha,
    lora_rank,
    model_list,
    one_device,
    one_of,
    per_model,
    seed_bits,
    tail_depth,
    tail_depths,
    tokens,
    visible_marker,
)
from kvutils.studies.qwen3_switch.tasks import CONTINUATION_BINS, TASKS


@dataclass(frozen=True)
class Chapter5Parameters(Declared):
    NOTEBOOK = "05_qwen3_switch"
    EXAMPLE = "-p models Qwen/Qwen3-0.6B"

    models: str = param("qwen2.5-0.5b",
                        "causal models: registry keys (qwen2.5-0.5b, the chapter's Qwen; add smollm2-135m "
                        "for a second family, about 15 minutes more), Hugging Face ids (e.g. Qwen/Qwen3-0.6B "
                        "where its weights exist) or local paths",
                        meaning="causal models (`qwen2.5-0.5b`: the chapter's Qwen, a Qwen2)",
                        allowed="registry keys, hub ids (`Qwen/Qwen3-0.6B` where its weights exist), local "
                                "dirs", check=model_list)
    task: str = param("continuation",
                      '"continuation" (does passage B continue passage A?) or "senses" (name the sense of an '
                      "ambiguous word)", meaning="what the adapters learn after the marker",
                      allowed="`continuation` (does passage B continue passage A?), `senses` (name the sense "
                              "of an ambiguous word)", check=one_of(TASKS))
    k_values: str | int = param("4,12",
                                "depths of the LoRA tails (and activated adapters) to train: adapted layers "
                                'at the top, "L" for every layer',
                                meaning="depths of the LoRA tails and of the activated adapters (one of each "
                                        "per k)", allowed="integers 1…L, or `L` (every layer)",
                                check=tail_depths)
    rank: int = param(16, "LoRA rank r, at least 1", meaning="LoRA rank and scaling", allowed="rank ≥ 1",
                      check=lora_rank)
    alpha: float = param(32, "LoRA scaling alpha (the update is scaled by alpha / r)", row="rank",
                         check=lora_alpha)
    targets: str = param("q,k,v,o,mlp", "projections each adapted layer gets: any of q, k, v, o, mlp",
                         meaning="projections adapted", allowed="any of `q`, `k`, `v`, `o`, `mlp`")
    steps: str | int = param(96, "AdamW steps per adapter: one number, or a default then model:steps pairs",
                             meaning="AdamW training (the seed also draws the examples)",
                             allowed="`steps`, `lr`: one number, or a default then `model:value` pairs; "
                                     "`steps` ≤ 100,000 (over 8 hours per adapter)", check=per_model)
    lr: str | float = param("0.003,gemma3-270m:0.001,qwen2.5-0.5b:0.0005",
                            "AdamW learning rate: one number, or a default then model:rate pairs (Gemma 3 "
                            "diverges at 0.003, the Qwen's 12-layer tail trained in float32 at 0.002)",
                            row="steps", check=per_model)
    batch_size: int = param(16, "training examples per step", row="steps", check=at_least(1))
    schedule: str = param("cosine",
                          'learning rate over the steps: "cosine" (a linear warm-up, then a cosine decay to '
                          '0) or "constant"', row="steps", check=one_of(SCHEDULES))
    warmup: int = param(10, "steps of linear warm-up (schedule cosine)", row="steps",
                        check=at_least(0, MAX_STEPS, STEPS_WHY))
    loss: str = param("answers",
                      'training loss: "answers" (cross-entropy of the right answer against the wrong one: ln '
                      '2 for a coin) or "vocab" (the answer token against the whole vocabulary)', row="steps",
                      check=one_of(LOSSES))
    max_grad_norm: float = param(1.0,
                                 "each step's gradient is scaled down to this norm where it is larger (0: no "
                                 "clipping)", row="steps", check=grad_norm)
    train_dtype: str = param("auto",
                             'training precision: "auto" (bfloat16 autocast where the device multiplies '
                             'bfloat16 natively, else float32), "float32" or "bfloat16"',
                             meaning="precision of training (evaluation keeps `dtype`)",
                             allowed="`auto` (bfloat16 autocast where the device multiplies bfloat16 "
                                     "natively: a CPU with AVX512-BF16/AMX, a CUDA GPU; else float32), "
                                     "`float32`, `bfloat16`")
    seed: int = param(0, "seeds the examples, adapter initialisation and batch order", row="steps",
                      check=seed_bits)
    marker: str = param("",
                        "the switch marker, which invokes the activated adapters; empty: the marker of the "
                        "task", meaning="the switch marker (the activated adapters' invocation)",
                        note="the task's own", allowed="visible text that tokenises the same after the text",
                        check=visible_marker)
    corpus: str = param("pydoc",
                        "continuation: documents to train on (and, by default, to hold out every 4th of): "
                        '"pydoc", a folder of .txt files or a .jsonl file',
                        meaning="`continuation`: training documents; held-out documents",
                        allowed="`pydoc`, a folder of `.txt` files or a `.jsonl` file; no document in both")
    eval_corpus: str = param("",
                             "continuation: held-out documents of another kind (a folder of .txt files or a "
                             ".jsonl file); empty: every 4th document of corpus", row="corpus",
                             note="every 4th document of `corpus`")
    passage_tokens: int = param(32, "continuation: tokens of passage A",
                                meaning="`continuation`: tokens of passage A and of passage B",
                                allowed="≥ 4 each", check=tokens(4))
    candidate_tokens: int = param(24, "continuation: tokens of passage B", row="passage_tokens",
                                  check=tokens(CONTINUATION_BINS))
    n_train: int = param(1024, "continuation: training examples (even: half true continuations)",
                         meaning="`continuation`: training and held-out examples",
                         allowed="even, ≥ 2 (≥ 64 held out for a useful interval)", check=even_count)
    n_heldout: int = param(128, "continuation: held-out examples (even; at least 64 for a useful interval)",
                           row="n_train", check=even_count)
    train_words: str = param("bank,bat,pitcher,mouse,spring,seal,plant,match,organ,pen,bark,palm",
                             "senses: words whose examples train the adapters",
                             meaning="`senses`: the train / held-out split of `senses_file`",
                             shown="12 / 4 words", allowed="disjoint words of `senses_file`")
    heldout_words: str = param("key,cell,club,fan",
                               "senses: words never trained on (must not overlap train_words)",
                               row="train_words")
    senses_file: str = param("data/senses.json",
                             "senses: the ambiguous words, their continuations, labels and reference "
                             "sentences", meaning="`senses`: the words, continuations and senses",
                             allowed="a file in that format")
    exact_examples: int = param(8,
                                "held-out examples on which every policy is compared with the full recompute",
                                meaning="held-out examples on which every policy is compared with the full "
                                        "recompute", allowed="1 … the held-out examples", check=at_least(1))
    patch_k: str | int = param(12, 'the tail (one of k_values, or "L") whose cache is patched',
                               meaning="the tail whose cache is patched; pairs of contexts (each cell's n: "
                                       "the pairs the unpatched adapter answers right); columns of the map",
                               allowed="one of `k_values`; ≥ 1 (at most the pairs the task gives: half the "
                                       "held-out examples for `continuation`); 1…L", check=tail_depth)
    patch_pairs: int = param(24,
                             "pairs of contexts in the patching map (each cell's n: those the clean adapter "
                             "answers right)", row="patch_k", check=at_least(1))
    patch_layer_groups: int = param(4,
                                    "columns of the patching map: the layers in this many contiguous groups",
                                    row="patch_k", check=layers)
    bench_tokens: int = param(256, "prefix length of the cost benchmark (tokens of the default corpus)",
                              meaning="prefix length and repeats of the cost benchmark",
                              allowed="`bench_tokens` ≥ 8, `timing_repeats` ≥ 1", check=tokens(8))
    timing_repeats: int = param(6,
                                "timed repetitions per policy (the median is reported; 6 is the fewest whose "
                                "paired test can reach p < 0.05)", row="bench_tokens", check=at_least(1))
    dtype: str = param("float32", '"float32" or "float64"',
                       meaning="precision of training, switching and scoring", allowed="`float32`, `float64`",
                       check=one_of(list(DTYPES)))
    results_dir: str = chapter_results_dir()
    device: str = torch_device(check=one_device)

    def check_together(self) -> None:
        """`patch_k` is one of `k_values` (where L, every layer, is not among them: it is a number only
        with the model)."""
        ks = k_items("k_values", self.k_values)
        patch = k_items("patch_k", str(self.patch_k))[0]
        if "L" not in ks and patch not in ks:
            raise ValueError(f"patch_k: {self.patch_k!r} is not one of the trained k_values "
                             f"({self.k_values}); give one of them")
