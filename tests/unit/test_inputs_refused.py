"""Refused at once and by name (issue 27): each command line checks its arguments before it
imports torch, so a bad input costs a fraction of a second of CPU; every integer field of an
operation and every numeric notebook parameter has an upper bound that says why; a model folder's
tokenizer must fit its config; `;` inside one --op, a link loop, and the default corpus at the
default lengths get messages of their own.

The CPU bound is measured, not timed: resource.getrusage of the finished child processes (user +
sys), which a busy machine does not inflate the way it does wall time."""
import dataclasses
import json
import resource
import subprocess
import sys
import typing

import numpy as np
import pytest

from kvutils.cache.registry import OPS, parse_op
from kvutils.core import checks, data, results
from kvutils.core.paths import REPO_ROOT
from kvutils.models import folders
from kvutils.models.checks import DTYPES, resolve
from kvutils.studies.parameters import DECLARED, Chapter5Parameters

CPU_LIMIT_S = 3.0


def _cli(argv: list[str]) -> tuple[int, str, float]:
    """(exit status, stderr, CPU seconds) of `python -m kvutils.<tool> argv...`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, proc.stderr + proc.stdout, cpu


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory):
    """Each bad input of the issue: (argv, words the message must hold)."""
    tmp = tmp_path_factory.mktemp("bad")
    (tmp / "loopA").symlink_to("loopB")
    (tmp / "loopB").symlink_to("loopA")
    (tmp / "out").mkdir()
    (tmp / "out" / "x").symlink_to("y")
    (tmp / "out" / "y").symlink_to("x")
    folder = _mismatched_model(tmp / "model")
    accept = ["kvutils.accept", "--model", "tiny-llama"]
    return {
        "docs missing": ([*accept, "--docs", str(tmp / "nothing"), "--op", "exact"], ["--docs", "does not exist"]),
        "unknown op": ([*accept, "--docs", "pydoc", "--op", "windw"], ["--op", "unknown operation 'windw'"]),
        "misspelt flag": ([*accept, "--docs", "pydoc", "--ops", "exact"], ["--ops", "did you mean --op?"]),
        "23-digit window": ([*accept, "--docs", "pydoc", "--op", "window:size=12345678901234567890123,sinks=4"],
                            ["window: size must be between 1 and", "positions"]),
        "65-bit seed": ([*accept, "--docs", "pydoc", "--op", "random:seed=36893488147419103232"],
                        ["random: seed must be between 0 and", "64 bits"]),
        "; in one --op": ([*accept, "--docs", "pydoc", "--op", "window:size=16,sinks=4;window:size=8,sinks=2"],
                          ["repeat --op", "--op 'window:size=16,sinks=4' --op 'window:size=8,sinks=2'"]),
        "--out in a link loop": ([*accept, "--docs", "pydoc", "--op", "exact", "--out", str(tmp / "out" / "x" / "a.json")],
                                 ["--out", "loop of symbolic links"]),
        "--docs a link loop": ([*accept, "--docs", str(tmp / "loopA"), "--op", "exact"],
                               ["--docs", "loop of symbolic links"]),
        "tokenizer of another model": (["kvutils.accept", "--model", str(folder), "--docs", "pydoc", "--op", "exact"],
                                       ["--model", "vocab_size 100", "token ids up to 299"]),
        "prefill past the model": ([*accept, "--docs", "pydoc", "--op", "exact", "--prefill", "100000000"],
                                   ["--prefill must be between 1 and"]),
        "passkey: depth 0": ([*accept, "--task", "passkey", "--op", "exact", "--depths", "0,0.5", "--context", "256"],
                             ["--depths", "outside (0, 1)"]),
        "passkey: context past the model": ([*accept, "--task", "passkey", "--op", "exact", "--context", "4096"],
                                            ["--context", "longer than tiny-llama handles"]),
        "passkey: haystack missing": ([*accept, "--task", "passkey", "--op", "exact", "--haystack", str(tmp / "none"),
                                       "--context", "256"],
                                      ["--haystack", "does not exist"]),
        "passkey: distractors for the pass key": ([*accept, "--task", "passkey", "--op", "exact", "--haystack", "filler",
                                                   "--distractors", "2", "--context", "256"],
                                                  ["--distractors", "pass key has one needle"]),
        "passkey: a flag of the score task": ([*accept, "--task", "passkey", "--op", "exact", "--docs", "pydoc",
                                               "--context", "256"], ["--docs: a flag of --task score, not of --task passkey"]),
        "score: a flag of the passkey task": ([*accept, "--docs", "pydoc", "--op", "exact", "--haystack", "pydoc"],
                                              ["--haystack: a flag of --task passkey, not of --task score"]),
        "passkey: an empty depth": ([*accept, "--task", "passkey", "--op", "exact", "--depths", "0.1,,0.5", "--context",
                                     "256"], ["--depths: '0.1,,0.5' has an empty item"]),
        "passkey: every operation refused by the model": (["kvutils.accept", "--model", "gemma3-270m", "--task", "passkey",
                                                           "--op", "hf_quantized:backend=fp8", "--context", "256"],
                                                          ["--op: every operation asked for is refused for gemma3-270m",
                                                           "sliding-attention"]),
        "chapters: misspelt parameter": (["kvutils.chapters", "03", "-p", "distanse", "cosine", "--no-pages",
                                          "--results-dir", str(tmp / "res")], ["distanse", "did you mean distance?"]),
        "chapters: rank": (["kvutils.chapters", "05", "-p", "rank", "100000000", "--no-pages", "--results-dir",
                            str(tmp / "res")], ["rank must be between 1 and", "rank at a layer's width"]),
        "chapters: seed": (["kvutils.chapters", "05", "-p", "seed", str(2 ** 64), "--no-pages", "--results-dir",
                            str(tmp / "res")], ["seed must be between 0 and", "64 bits"]),
        "bench: repeats": (["kvutils.bench", "--repeats", "0"], ["--repeats must be >= 1"]),
        "bench: misspelt flag": (["kvutils.bench", "--repeat", "3", "--result-dir", "x"], ["did you mean"]),
        "results_diff: no folder": (["kvutils.results_diff", str(tmp / "a"), str(tmp / "b")], ["not a folder"]),
        "browser_check: no folder": (["kvutils.browser_check", str(tmp / "html")], ["html_dir", "not a folder"]),
    }


def _mismatched_model(folder):
    """A llama folder whose config and embedding say 100 tokens, beside a tokenizer of 300."""
    from safetensors.numpy import save_file

    folder.mkdir()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 8,
              "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16,
              "max_position_embeddings": 64}
    (folder / "config.json").write_text(json.dumps(config))
    vocab = {f"t{i}": i for i in range(300)}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"},
                                                       "added_tokens": []}))
    save_file({"model.embed_tokens.weight": np.zeros((100, 8), dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


CASES = ["docs missing", "unknown op", "misspelt flag", "23-digit window", "65-bit seed", "; in one --op",
         "--out in a link loop", "--docs a link loop", "tokenizer of another model", "prefill past the model",
         "passkey: depth 0", "passkey: context past the model", "passkey: haystack missing",
         "passkey: distractors for the pass key", "passkey: a flag of the score task", "score: a flag of the passkey task",
         "passkey: an empty depth", "passkey: every operation refused by the model",
         "chapters: misspelt parameter", "chapters: rank", "chapters: seed", "bench: repeats", "bench: misspelt flag",
         "results_diff: no folder", "browser_check: no folder"]


@pytest.mark.parametrize("case", CASES)
def test_each_bad_input_is_refused_by_name_in_under_3_s_of_cpu(case, bad_inputs):
    argv, words = bad_inputs[case]
    code, text, cpu = _cli(argv)
    assert code == 2, text
    assert "Traceback" not in text, text
    for word in words:
        assert word in text, (word, text)
    assert cpu < CPU_LIMIT_S, f"{case}: {cpu:.2f} s of CPU"


@pytest.mark.parametrize("tool, words", [("kvutils.accept", ["--op", "window (size=128", "--docs", "--task"]),
                                         ("kvutils.bench", ["--repeats", "bench.json"]),
                                         ("kvutils.chapters", ["--profile", "-p NAME VALUE"])])
def test_the_help_still_prints_at_once(tool, words):
    code, text, cpu = _cli([tool, "--help"])
    assert code == 0, text
    assert all(w in text for w in words), text
    assert cpu < CPU_LIMIT_S


def test_the_argument_checks_import_no_torch():
    """What the commands run before their heavy import: none of it may pull torch or transformers."""
    code = ("import sys\n"
            "import kvutils.cache.accept_args, kvutils.cache.registry, kvutils.studies.parameters, kvutils.book.chapters\n"
            "import kvutils.studies.bench_args, kvutils.models.checks, kvutils.core.data, kvutils.core.results\n"
            "from kvutils.models.checks import resolve\n"
            "resolve('tiny-llama')\n"
            "print(sorted(m for m in ('torch', 'transformers', 'papermill') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_model_types_read_from_source_are_transformers_own():
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    folders.implemented_model_types.cache_clear()
    modules = dict(sys.modules)
    sys.modules.pop(folders.CONFIG_MAPPING, None)  # as before the import: read from the source
    try:
        assert folders.implemented_model_types() == frozenset(CONFIG_MAPPING_NAMES)
    finally:
        sys.modules.update(modules)
        folders.implemented_model_types.cache_clear()


def test_the_dtype_names_are_those_the_loader_takes():
    from kvutils.models.loading import DTYPES as LOADER_DTYPES

    assert tuple(LOADER_DTYPES) == DTYPES


# --------------------------------------------------------------------------- bounds where values are parsed


INT_FIELDS = [(name, f.name) for name, cls in OPS.items() for f in dataclasses.fields(cls)
              if typing.get_type_hints(cls)[f.name] is int]


@pytest.mark.parametrize("op, field", INT_FIELDS)
def test_every_integer_field_of_an_operation_has_an_upper_bound_that_says_why(op, field):
    assert INT_FIELDS, "no integer fields found"
    with pytest.raises(ValueError, match=rf"^{op}: {field}") as err:
        parse_op(f"{op}:{field}={10 ** 23}")
    assert "must be between" in str(err.value) and "(" in str(err.value) or "must be one of" in str(err.value)


def test_a_seed_is_any_64_bit_number():
    assert parse_op(f"random:seed={2 ** 64 - 1}").seed == 2 ** 64 - 1
    with pytest.raises(ValueError, match="a seed is 64 bits"):
        parse_op(f"random:seed={2 ** 64}")


NUMERIC = [(cls, f.name) for cls in DECLARED.values() for f in dataclasses.fields(cls)
           if f.metadata["check"] is not None and isinstance(f.default, (int, float)) and not isinstance(f.default, bool)]


@pytest.mark.parametrize("cls, name", NUMERIC, ids=[f"{c.NOTEBOOK}-{n}" for c, n in NUMERIC])
def test_every_numeric_notebook_parameter_has_an_upper_bound(cls, name):
    with pytest.raises(ValueError, match=rf"^{name}"):
        cls(**{name: 10 ** 30})


def test_chapter_5_refuses_a_rank_whose_adapters_would_not_fit_in_memory():
    from types import SimpleNamespace

    from kvutils.studies.qwen3_switch.study import check_rank_fits

    config = SimpleNamespace(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                             intermediate_size=14336, num_hidden_layers=32)
    check_rank_fits(config, [2, 4, 8], 8, ["q", "k", "v", "o", "mlp"], "big")
    with pytest.raises(ValueError, match=r"^rank: 60,000 would need [\d,.]+ GiB .* more than this machine's"):
        check_rank_fits(config, [2, 4, 32], 60_000, ["q", "k", "v", "o", "mlp"], "big")
    Chapter5Parameters(rank=60_000)  # below the declared bound: the memory check (from the config) decides


# --------------------------------------------------------------------------- messages


def test_a_model_folder_whose_tokenizer_outgrows_its_config_is_refused_naming_both(tmp_path):
    folder = _mismatched_model(tmp_path / "model")
    with pytest.raises(ValueError, match=r"token ids up to 299, but .*config.json gives vocab_size 100"):
        resolve(str(folder))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 400}))
    with pytest.raises(ValueError, match=r"gives vocab_size 400, but the weights' model.embed_tokens.weight has 100 rows"):
        resolve(str(folder))


def test_link_loops_are_called_loops(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    for call in (lambda: data.load_corpus(str(tmp_path / "a"), "corpus"),
                 lambda: data.read_text(tmp_path / "a", "senses_file"),
                 lambda: results.check_folder(tmp_path / "a" / "sub", "results_dir"),
                 lambda: results.check_output_file(tmp_path / "a", "--out")):
        with pytest.raises(ValueError, match="is a loop of symbolic links"):
            call()


def test_check_int_names_a_huge_value_by_its_digits():
    with pytest.raises(ValueError, match="got a number of 40 digits"):
        checks.check_count("prefill", 10 ** 39)
