"""Chapter 1's plan: bad parameters fail before any model loads (the notebook's first cell calls it)
and the prompts are prepared without loading; chapter 2's sentence on an exact zero
(tests/book/test_chapter1_notebook.py runs the notebook)."""
import pytest

from kvutils.studies import cache_exactness as exactness
from kvutils.studies.parameters import Chapter1Parameters

GOOD = dict(models="tiny-llama", dtypes="float64", n_prompts=2, prompt_tokens=8, new_tokens=4,
            recompute="one_pass", batch_size=2, corpus="pydoc", senses_file="data/senses.json",
            garden_paths_file="data/garden_paths.json", results_dir="results", device="cpu", per_step_prompts=0)


@pytest.mark.parametrize("change, message", [
    (dict(models="gpt-17"), r"models: unknown model 'gpt-17'"),
    (dict(models="minilm-l6"), r"models: minilm-l6 is a bidirectional encoder"),
    (dict(dtypes="float16"), r"dtypes: 'float16' not allowed"),
    (dict(new_tokens=600), r"models: tiny-llama handles at most 512 tokens.*608"),
    (dict(n_prompts=10_000), r"n_prompts=10000, but the corpus supplies only"),
    (dict(prompt_tokens=8000, models="gemma3-270m", new_tokens=1), r"prompt_tokens=8000: documents too short: pydoc:"),
    (dict(recompute="sometimes"), r"recompute: 'sometimes' is not allowed"),
    (dict(senses_file="nowhere.json"), r"senses_file: file not found"),
    (dict(device="cuda:3"), r"device: 'cuda:3'"),
    (dict(batch_size=0), r"batch_size must be >= 1"),
    (dict(per_step_prompts=-1), r"per_step_prompts must be >= 0"),
])
def test_bad_parameters_fail_before_any_model_loads(change, message, no_model_loads):
    with pytest.raises(ValueError, match=message):
        exactness.plan(Chapter1Parameters(**{**GOOD, **change}))


def test_plan_prepares_prompts_without_loading(no_model_loads):
    p = exactness.plan(Chapter1Parameters(**GOOD))
    assert p.prompts["tiny-llama"].shape == (2, 8) and len(p.pairs) == 18


def test_the_per_step_subset_is_capped_and_never_doubles_a_per_step_run(no_model_loads):
    assert exactness.plan(Chapter1Parameters(**{**GOOD, "per_step_prompts": 4})).per_step_prompts == 2  # n_prompts = 2
    per_step = Chapter1Parameters(**{**GOOD, "per_step_prompts": 4, "recompute": "per_step"})
    assert exactness.plan(per_step).per_step_prompts == 0
    assert exactness.plan(Chapter1Parameters(**GOOD)).per_step_prompts == 0


def _ch2_causal(identical: int, largest: float) -> dict:
    return {"family": "causal", "states_bit_identical_words": identical, "n_words": 16,
            "cosine_distance_max": [0.0, largest]}


def test_chapter2_zero_says_what_equal_padding_shows():
    """Chapter 2 said an exact 0 comes 'because nothing to the right of "bank" enters their
    computation', beside chapter 1's non-zero fp32 residues (alone vs inside, 15 of 18 prefixes). The
    zero comes from both contexts sharing one padded batch (equal shapes); the sentence now says so."""
    from kvutils.report import bert_contrast as report_contrast

    text = report_contrast.chapter2_glue({"g": {**_ch2_causal(16, 0.0), "layers": 1, "key_relative_diff_max": [0.0],
                                                "cosine_distance_mean": [0.0, 0.0]}}, batch_size=32)["causal_zero"]
    assert "nothing to the right" not in text and "one right-padded batch" in text
    assert "bit equality at equal shapes" in text and "does not contradict chapter 1" in text
    odd = report_contrast.causal_zero({"g": _ch2_causal(16, 0.0)}, 31)
    assert "did not always share a batch" in odd and "equal shapes" not in odd
    part = report_contrast.causal_zero({"g": _ch2_causal(16, 0.0), "s": _ch2_causal(15, 1e-7)}, 32)
    assert part.startswith("On g the word's state") and "not on every causal model (s: 15 of 16 words" in part
    assert report_contrast.causal_zero({"s": _ch2_causal(15, 1e-7)}, 32).startswith("Not on every causal model")
