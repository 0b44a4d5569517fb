"""Bad inputs, checked before the work: each case is a clear error naming the parameter or the file
(or, for a valid input, the right value). The cases are listed as parametrisations, so the count of
cases tried is `pytest tests/unit/test_inputs.py --collect-only -q | wc -l` (and
tests/book/test_inputs_notebook.py's, stopping a real notebook run)."""
import json
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from kvutils.core import checks, data, params, records, results
from kvutils.core.catalog import NOTEBOOKS, PAGES
from kvutils.core.paths import REPO_ROOT
from kvutils.models import loading
from kvutils.models import registry as models
from kvutils.models.checks import check_models, resolve
from kvutils.studies.parameters import DECLARED

ALL_NOTEBOOKS = [*NOTEBOOKS.values(), *PAGES.values()]

# --------------------------------------------------------------------------- single values and ranges


@pytest.mark.parametrize("value, expected", [
    (2000, [2000]), ("2000", [2000]), ("128,2000", [128, 2000]), (" 4 ", [4]), ("1, 2 ,3", [1, 2, 3]),
    ([1, 2], [1, 2]), ((8,), [8]), ("+5", [5]),
])
def test_int_lists_take_one_number_as_papermill_passes_it(value, expected):
    assert checks.check_int_list("contexts", value, 1) == expected


@pytest.mark.parametrize("value, message", [
    (0, "contexts: every value must be >= 1; 0 is not"),
    ("0", "contexts: every value must be >= 1; 0 is not"),
    ("128,-3", "contexts: every value must be >= 1; -3 is not"),
    ("a", "contexts must be integers separated by commas, e.g. \"128,2000\"; 'a' is not an integer"),
    ("1.5", "contexts must be integers separated by commas, e.g. \"128,2000\"; '1.5' is not an integer"),
    (1.5, "contexts must be integers separated by commas, e.g. \"128,2000\"; '1.5' is not an integer"),
    ("4,x", "contexts must be integers separated by commas, e.g. \"128,2000\"; 'x' is not an integer"),
    ("", "contexts is empty"),
    (" , ", "contexts is empty"),
    (True, "contexts must be values separated by commas"),
    (None, "contexts must be values separated by commas"),
    ({"a": 1}, "contexts must be values separated by commas"),
])
def test_int_list_errors_say_what_is_wrong(value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        checks.check_int_list("contexts", value, 1)


@pytest.mark.parametrize("value, message", [
    (0, "k_values: k=0 is not allowed"), ("0", "k_values: k=0 is not allowed"),
    (9, "k_values: k=9 is not allowed"), ("1,x", "k_values: k='x' is not allowed"),
    (None, "k_values must be values separated by commas"), ("", "k_values is empty"),
])
def test_k_values_errors_give_the_allowed_range(value, message):
    from kvutils.studies.qwen3_switch import study as switch

    with pytest.raises(ValueError, match=re.escape(message)) as err:
        switch.parse_k_values(value, 4, "tiny-qwen3")
    assert "comma-separated string" not in str(err.value)


@pytest.mark.parametrize("value, expected", [(4, [4]), ("4", [4]), ("1,2,L", [1, 2, 4]), ("L", [4])])
def test_k_values_take_a_single_int(value, expected):
    from kvutils.studies.qwen3_switch import study as switch

    assert switch.parse_k_values(value, 4, "tiny-qwen3") == expected


@pytest.mark.parametrize("value", ["abc", None, True, float("nan"), float("inf"), 0, -1, 100.5, [99]])
def test_near_exact_pct_must_be_a_percentage(value):
    with pytest.raises(ValueError, match=r"^near_exact_pct (must be a number|must be in \(0, 100\])"):
        checks.check_number("near_exact_pct", value, 0, 100, low_inclusive=False)


@pytest.mark.parametrize("value", [0.5, 50, 99.0, 100])
def test_near_exact_pct_accepts_percentages(value):
    assert checks.check_number("near_exact_pct", value, 0, 100, low_inclusive=False) == float(value)


@pytest.mark.parametrize("value, message", [
    (True, "must be an integer"), ("4", "must be an integer"), (4.0, "must be an integer"),
    (0, "must be >= 1, got 0"), (-2, "must be >= 1, got -2"),
])
def test_int_parameters(value, message):
    with pytest.raises(ValueError, match=f"^batch_size {message}"):
        checks.check_int("batch_size", value, 1)


# --------------------------------------------------------------------------- misspelt parameter names


def _misspell(name: str) -> str:
    """A typo a user makes: the underscore dropped, or (without one) the last letter doubled."""
    return name.replace("_", "", 1) if "_" in name else name + name[-1]


MISSPELT = [(nb, name) for nb in ALL_NOTEBOOKS for name in DECLARED[nb].names()]


@pytest.mark.parametrize("notebook, name", MISSPELT, ids=[f"{n}-{p}" for n, p in MISSPELT])
def test_a_misspelt_parameter_stops_the_run_naming_the_closest(notebook, name):
    typo = _misspell(name)
    injected = {"In": ["", "# Parameters (papermill ...)\nx = 1\n", f"# Parameters\n{typo} = 4\n{name} = 1\n"]}
    with pytest.raises(ValueError, match=rf"^{re.escape(typo)}: not a parameter of {notebook} \(did you mean "
                                         rf"{re.escape(name)}\?\)"):
        params.reject_unknown(injected, notebook, DECLARED[notebook].names())


@pytest.mark.parametrize("notebook", ALL_NOTEBOOKS)
def test_known_parameters_and_interactive_runs_pass(notebook):
    known = DECLARED[notebook].defaults()
    assert "results_dir" in known
    injected = "# Parameters\n" + "".join(f"{name} = {value!r}\n" for name, value in known.items())
    params.reject_unknown({"In": ["", injected]}, notebook, known)
    params.reject_unknown({"In": ["", "zzz = 1\n"]}, notebook, known)  # a user's own cell in Jupyter is not -p
    params.reject_unknown({}, notebook, known)  # outside IPython: nothing was injected


def test_a_name_unlike_any_parameter_lists_them_all():
    with pytest.raises(ValueError, match=r"^zzz: not a parameter of 01_cache_exactness\. Its parameters: models, "):
        DECLARED["01_cache_exactness"].check_names(params.injected_names({"In": ["# Parameters\nzzz = 1\n"]}))


# --------------------------------------------------------------------------- the README's rerun example


def _readme_papermill_runs():
    for line in (REPO_ROOT / "README.md").read_text().splitlines():
        if line.startswith(("papermill notebooks/", "python -m kvutils.rerun notebooks/")):
            notebook = re.search(r"notebooks/(\w+)\.ipynb", line).group(1)
            yield notebook, dict(re.findall(r"-p (\w+) (\S+)", line))


@pytest.mark.parametrize("notebook, overrides", list(_readme_papermill_runs()))
def test_the_readme_rerun_example_does_not_replace_the_books_results(notebook, overrides, capsys):
    namespace = {**DECLARED[notebook].defaults(), **overrides}
    folder = params.run_folder(namespace, notebook, DECLARED[notebook].defaults())
    assert Path(folder).parent == Path("runs") and Path(folder).name.startswith(notebook)
    number = next(n for n, name in NOTEBOOKS.items() if name == notebook)
    assert f"make chapter N={number}" in capsys.readouterr().out


def test_the_readmes_papermill_copies_land_in_an_ignored_folder():
    """Each papermill example writes its executed copy under runs/ (made by the line before them),
    which git ignores: no out.ipynb left in the repository's root."""
    import subprocess

    text = (REPO_ROOT / "README.md").read_text()
    outputs = re.findall(r"^(?:papermill|python -m kvutils\.rerun) notebooks/\w+\.ipynb (\S+)", text, flags=re.M)
    assert len(outputs) >= 3 and all(o.startswith("runs/") for o in outputs), outputs
    assert "mkdir -p runs" in text and "out.ipynb" not in text
    ignored = subprocess.run(["git", "check-ignore", "-q", "runs/x.ipynb"], cwd=REPO_ROOT)
    assert ignored.returncode == 0


def test_the_defaults_and_an_explicit_results_dir_are_kept():
    defaults = DECLARED["01_cache_exactness"].defaults()
    assert params.run_folder(dict(defaults), "01_cache_exactness", defaults) == "results"
    explicit = {**defaults, "n_prompts": 8, "results_dir": "/abs/results"}  # what make chapter passes
    assert params.run_folder(explicit, "01_cache_exactness", defaults) == "/abs/results"


# --------------------------------------------------------------------------- output paths


def _output_case(tmp_path: Path, case: str) -> tuple[Path, str]:
    """A results_dir that cannot work, and the words its error must contain."""
    folder = tmp_path / "out"
    if case == "a file":
        folder.write_text("x")
        return folder, "is a file, not a folder"
    if case == "under a file":
        (tmp_path / "f").write_text("x")
        return tmp_path / "f" / "sub", "cannot be a folder"
    if case == "json is a folder":
        (folder / "ch.json").mkdir(parents=True)
        return folder, "ch.json is a folder"
    if case == "figures is a file":
        folder.mkdir()
        (folder / "figures").write_text("x")
        return folder, "figures is a file"
    if case == "read-only":
        return Path("/proc/kvutils-results"), "cannot be created"
    if case == "read-only existing":
        return Path("/proc/self"), "cannot write in"
    raise AssertionError(case)


OUTPUT_CASES = ["a file", "under a file", "json is a folder", "figures is a file", "read-only", "read-only existing"]


@pytest.mark.parametrize("case", OUTPUT_CASES)
def test_a_bad_results_dir_is_named_before_any_work(tmp_path, case):
    folder, words = _output_case(tmp_path, case)
    with pytest.raises(ValueError, match=r"^results_dir: ") as err:
        results.check_output(folder, "ch")
    assert words in str(err.value)


@pytest.mark.parametrize("value", ["", "  ", None, 5])
def test_results_dir_must_be_a_path(value):
    with pytest.raises(ValueError, match="^results_dir must be a folder path"):
        results.check_output(value, "ch")


def test_a_usable_results_dir_is_checked_without_creating_it(tmp_path):
    assert results.check_output(tmp_path / "new" / "deeper", "ch") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()
    results.check_output(tmp_path, "ch")
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(sys.platform == "win32" or __import__("os").geteuid() == 0,
                    reason="root writes into read-only folders anyway")
def test_an_unwritable_results_dir(tmp_path):
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ValueError, match="results_dir: cannot write in"):
            results.check_output(tmp_path, "ch")
    finally:
        tmp_path.chmod(0o700)


@pytest.mark.parametrize("case", ["a folder", "under a file", "read-only"])
def test_accept_out_is_checked_before_any_model_loads(tmp_path, case, capsys, no_model_loads):
    from kvutils.cache import accept

    out = {"a folder": tmp_path, "under a file": tmp_path / "f" / "a.json",
           "read-only": Path("/proc/kvutils/a.json")}[case]
    (tmp_path / "f").write_text("x")
    started = time.time()
    with pytest.raises(SystemExit) as exit_:
        accept.main(["--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--out", str(out)])
    assert exit_.value.code == 2 and time.time() - started < 10
    assert "--out: " in capsys.readouterr().err


# --------------------------------------------------------------------------- text that is not text


def _bad_text(kind: str) -> bytes:
    return {"latin-1": "café au lait\nnaïve\n".encode("latin-1"), "binary": bytes(range(256)) * 4,
            "nul": b"text\n\x00\x01 more\n", "cp1252": "smart \u201cquotes\u201d".encode("cp1252")}[kind]


@pytest.mark.parametrize("kind", ["latin-1", "binary", "nul", "cp1252"])
def test_a_txt_corpus_that_is_not_utf8_is_named(tmp_path, kind):
    (tmp_path / "a.txt").write_text("fine text " * 50)
    (tmp_path / "b.txt").write_bytes(_bad_text(kind))
    with pytest.raises(ValueError, match=rf"^corpus: {re.escape(str(tmp_path / 'b.txt'))} is (not UTF-8|binary).*line"):
        data.load_corpus(str(tmp_path))


@pytest.mark.parametrize("kind", ["latin-1", "binary", "cp1252"])
def test_a_jsonl_corpus_that_is_not_utf8_names_the_line(tmp_path, kind):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(json.dumps({"text": "fine"}).encode() + b"\n"
                     + b'{"text": "' + _bad_text(kind).replace(b"\n", b" ") + b'"}\n')
    with pytest.raises(ValueError, match=r"^corpus: .*docs\.jsonl is not UTF-8 text \(line 2"):
        data.load_corpus(str(path))


@pytest.mark.parametrize("loader, parameter", [(data.load_senses, "senses_file"),
                                               (data.load_garden_paths, "garden_paths_file")])
@pytest.mark.parametrize("kind", ["latin-1", "nul"])
def test_study_files_that_are_not_utf8_are_named(tmp_path, loader, parameter, kind):
    path = tmp_path / "study.json"
    path.write_bytes(b'{"words": "' + _bad_text(kind) + b'"}')
    with pytest.raises(ValueError, match=rf"^{parameter}: .*study\.json is (not UTF-8|binary)"):
        loader(path)


def test_utf8_text_with_accents_and_a_bom_is_read(tmp_path):
    (tmp_path / "a.txt").write_bytes("\ufeffcafé naïve — ok".encode("utf-8"))
    assert data.load_corpus(str(tmp_path))[0].text == "café naïve — ok"


# --------------------------------------------------------------------------- wrong shapes name the file


@pytest.mark.parametrize("loader, parameter, key", [(data.load_senses, "senses_file", "words"),
                                                    (data.load_garden_paths, "garden_paths_file", "garden_paths")])
@pytest.mark.parametrize("top", [[], [1, 2], "text", 3, None])
def test_study_files_whose_top_level_is_not_an_object(tmp_path, loader, parameter, key, top):
    path = tmp_path / "study.json"
    path.write_text(json.dumps(top))
    with pytest.raises(ValueError, match=rf'^{parameter}: .*study\.json must hold a JSON object with "{key}"'):
        loader(path)


@pytest.mark.parametrize("loader, parameter", [(data.load_senses, "senses_file"),
                                               (data.load_garden_paths, "garden_paths_file")])
@pytest.mark.parametrize("value, words", [(5, "must be a file path"), ("", "must be a file path"),
                                          (".", "is a folder")])
def test_study_file_parameter_that_is_not_a_file(loader, parameter, value, words):
    with pytest.raises(ValueError, match=rf"^{parameter}[: ].*{words}"):
        loader(value)


@pytest.mark.parametrize("value", [5, None, ""])
def test_corpus_parameter_that_is_not_a_path(value):
    with pytest.raises(ValueError, match="^corpus must be"):
        data.load_corpus(value)


@pytest.mark.parametrize("content, words", [
    ("", "is not a valid results file"), ('{"chapter": "01", "numbers": {"a": ', "is not a valid results file"),
    ("[1, 2]", 'no "numbers" object'), ('{"numbers": 3}', 'no "numbers" object'),
    (b"\xff\xfe", "is not a valid results file"),
])
def test_a_damaged_results_file_is_named(tmp_path, content, words):
    path = tmp_path / "01_cache_exactness.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=rf"^results_dir: {re.escape(str(path))} .*{words}") as err:
        records.load_results(tmp_path, "01_cache_exactness")
    assert "rerun chapter" in str(err.value)


def test_the_summary_pages_name_a_truncated_results_file(tmp_path):
    import gzip

    from kvutils.report import appendix as report_appendix
    from kvutils.report import conclusions as report_conclusions

    full_build = Path(__file__).parents[1] / "data" / "full_build"
    for name in NOTEBOOKS.values():  # a full build's files, which follow their formats ...
        (tmp_path / f"{name}.json").write_bytes(gzip.decompress((full_build / f"{name}.json.gz").read_bytes()))
    (tmp_path / "04_cache_approximations.json").write_text('{"numbers": {"table2": ')  # ... but chapter 4's, cut short
    for read in (report_conclusions.load_chapters, report_appendix.available_runs):
        with pytest.raises(ValueError, match=r"results_dir: .*04_cache_approximations\.json is not a valid results"):
            read(tmp_path)


@pytest.mark.parametrize("page", ["conclusions", "appendix A", "appendix B"])
def test_the_summary_pages_name_results_of_another_version(tmp_path, page):
    """Valid JSON with a "numbers" object, but not the fields this version writes (an older
    kvutils, or a hand edit): named in the page's first cell, with where the file departs from its
    format (kvutils.core.schema) and what to rerun, not a KeyError in a later cell."""
    from kvutils.report import appendix as report_appendix
    from kvutils.report import conclusions as report_conclusions

    for name in NOTEBOOKS.values():
        (tmp_path / f"{name}.json").write_text('{"numbers": {"some_model": {}}}')
    (tmp_path / "bench.json").write_text('{"model": "smollm2-135m"}')
    read = {"conclusions": report_conclusions.load_chapters, "appendix A": report_appendix.available_runs,
            "appendix B": report_appendix.load_bench}[page]
    first = "bench" if page == "appendix B" else "01_cache_exactness"
    with pytest.raises(ValueError, match=rf"^results_dir: {re.escape(str(tmp_path / first))}\.json does not follow "
                                         rf"its format, kvutils/core/schemas/{first}\.schema\.json, at the top: "
                                         r"'\w+' is a required property \(and \d+ more\); it was written by another "
                                         r"version of kvutils or edited: rerun"):
        read(tmp_path)


@pytest.mark.parametrize("content, words", [("", "bench.json is not a valid results file"),
                                            ('{"model": ', "bench.json is not a valid results file"),
                                            (None, "no bench.json in")])
def test_appendix_b_names_a_damaged_or_missing_bench_file(tmp_path, content, words):
    from kvutils.report import appendix as report_appendix

    if content is not None:
        (tmp_path / "bench.json").write_text(content)
    with pytest.raises((ValueError, FileNotFoundError), match=rf"^results_dir: .*{words}"):
        report_appendix.load_bench(tmp_path)


def test_a_full_disk_names_results_dir_and_keeps_the_previous_run(tmp_path):
    import errno

    import matplotlib.pyplot as plt

    results.save_run(tmp_path, "ch", {}, [], {"run": 1}, time.time())
    fig = plt.figure()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    fig.savefig = full
    with pytest.raises(OSError, match=rf"^\[Errno 28\] results_dir: cannot write ch's results in {re.escape(str(tmp_path))} "
                                      r"\(No space left on device\); its previous results and figures are as they were"):
        results.save_run(tmp_path, "ch", {}, [], {"run": 2}, time.time(), figures={"ch_fig": fig})
    plt.close(fig)
    assert json.loads((tmp_path / "ch.json").read_text())["numbers"] == {"run": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["ch.json"]  # no staging folder left


def test_accept_out_under_home_is_written_where_it_was_checked(tmp_path, monkeypatch, capsys):
    from kvutils.cache import accept

    monkeypatch.setenv("KVUTILS_CACHE", str(models.cache_dir()))  # the converted models stay where they are
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path)
    assert accept.main(["--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--prefill", "16", "--decode", "8",
                        "--n-docs", "1", "--out=~/a.json"]) == 0
    assert (tmp_path / "home" / "a.json").is_file() and not (tmp_path / "~").exists()
    assert f"wrote {tmp_path / 'home' / 'a.json'}" in capsys.readouterr().out


def test_a_results_dir_under_home_is_written_where_it_was_checked(tmp_path, monkeypatch):
    """'~/runs' (quoted, so no shell expanded it) is checked and written as the same folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    namespace = {"results_dir": "~/runs", "In": []}
    folder = DECLARED["02_bert_contrast"].from_notebook(namespace).results_dir
    assert folder == str(tmp_path / "home" / "runs")
    results.save_run("~/runs", "02_bert_contrast", {}, [], {"x": 1}, time.time())
    assert (tmp_path / "home" / "runs" / "02_bert_contrast.json").is_file()
    assert not (tmp_path / "~").exists()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A reader's model folder: the tiny Llama saved with its tokenizer."""
    from conftest import load_cached

    folder = tmp_path_factory.mktemp("model")
    tiny = load_cached("tiny-llama", "float32")
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def _broken_model(model_dir: Path, tmp_path: Path, case: str) -> tuple[Path, type, str]:
    folder = tmp_path / "m"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    weights = folder / "model.safetensors"
    if case == "config not JSON":
        (folder / "config.json").write_text('{"model_type": "llama", ')
        return folder, ValueError, "config.json is not valid JSON"
    if case == "config not UTF-8":
        (folder / "config.json").write_bytes(b'{"model_type": "ll\xe9ma"}')
        return folder, ValueError, "config.json is not valid JSON"
    if case == "config a list":
        (folder / "config.json").write_text("[]")
        return folder, ValueError, 'config.json must be a JSON object with a "model_type"'
    if case == "config without model_type":
        (folder / "config.json").write_text(json.dumps({k: v for k, v in config.items() if k != "model_type"}))
        return folder, ValueError, 'must be a JSON object with a "model_type"'
    if case == "custom code":
        config.update(model_type="my_arch", auto_map={"AutoModelForCausalLM": "modeling_my.MyModel"})
        (folder / "config.json").write_text(json.dumps(config))
        return folder, ValueError, "kvutils never passes trust_remote_code"
    if case == "no tokenizer":
        for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
            (folder / name).unlink(missing_ok=True)
        return folder, models.ModelNotAvailable, "has no tokenizer"
    if case == "no config":
        (folder / "config.json").unlink()
        return folder, models.ModelNotAvailable, "has no config.json"
    if case == "garbage safetensors":
        weights.write_bytes(b"not a safetensors file at all" * 10)
        return folder, ValueError, "model.safetensors is not a readable safetensors file"
    if case == "truncated safetensors":
        weights.write_bytes(weights.read_bytes()[:4096])
        return folder, ValueError, "model.safetensors is not a readable safetensors file"
    if case == "empty safetensors":
        weights.write_bytes(b"")
        return folder, ValueError, "model.safetensors is not a readable safetensors file"
    if case == "tokenizer.json not JSON":
        (folder / "tokenizer.json").write_text('{"version": ')
        return folder, ValueError, "tokenizer.json is not valid UTF-8 JSON"
    if case == "context not a number":
        config["max_position_embeddings"] = "lots"
        (folder / "config.json").write_text(json.dumps(config))
        return folder, ValueError, "max_position_embeddings must be a positive integer, got 'lots'"
    if case == "config without sizes":
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        return folder, ValueError, "gives no layer count (num_hidden_layers) or no width (hidden_size)"
    if case == "config wider than the weights":
        config["hidden_size"] *= 2
        (folder / "config.json").write_text(json.dumps(config))
        return folder, ValueError, (f"gives the token embedding width {config['hidden_size']}, but the weights' "
                                    "model.embed_tokens.weight is")
    if case == "pickled weights only":
        weights.unlink()
        (folder / "pytorch_model.bin").write_bytes(b"never unpickled")
        return folder, models.ModelNotAvailable, "holds no *.safetensors weights"
    raise AssertionError(case)


MODEL_CASES = ["config not JSON", "config not UTF-8", "config a list", "config without model_type", "custom code",
               "no tokenizer", "no config", "garbage safetensors", "truncated safetensors", "empty safetensors",
               "pickled weights only", "tokenizer.json not JSON", "context not a number", "config without sizes",
               "config wider than the weights"]


@pytest.mark.parametrize("case", MODEL_CASES)
def test_a_broken_model_folder_is_named_before_loading(model_dir, tmp_path, case):
    folder, error, words = _broken_model(model_dir, tmp_path, case)
    with pytest.raises(error) as err:
        check_models("models", str(folder))
    message = str(err.value)
    assert message.startswith(f"models: model '{folder}'") and words in message
    assert "trust_remote_code=True" not in message


def test_an_embedding_projected_up_to_the_layers_width_is_accepted(model_dir, tmp_path):
    """OPT-350m embeds tokens 512 wide and projects them to its 1024-wide layers
    (word_embed_proj_dim); ALBERT names that width embedding_size. Neither is a mismatch."""
    folder = tmp_path / "m"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(word_embed_proj_dim=config["hidden_size"], hidden_size=config["hidden_size"] * 2)
    (folder / "config.json").write_text(json.dumps(config))
    assert check_models("models", str(folder))[0].path == folder


def test_weights_that_do_not_fit_their_config_name_the_model(model_dir, tmp_path):
    """resolve reads only the headers; a shape that does not fit config.json shows when transformers
    loads, and is then named, not a bare RuntimeError."""
    folder = tmp_path / "m"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["intermediate_size"] += 8
    (folder / "config.json").write_text(json.dumps(config))
    check_models("models", str(folder))
    with pytest.raises(ValueError, match=rf"^model '{re.escape(str(folder))}': "
                                         rf"transformers could not load {re.escape(str(folder))} \(RuntimeError: "):
        loading.load(str(folder))


def test_a_custom_tokenizer_is_refused_without_suggesting_remote_code(model_dir, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(model_dir, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="MyTok", auto_map={"AutoTokenizer": ["tok.MyTok", None]})
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="kvutils never passes trust_remote_code") as err:
        loading.load_tokenizer(str(folder))
    assert "trust_remote_code=True" not in str(err.value)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    return cache


def _cache_model(cache: Path, repo_id: str, source: Path) -> None:
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    shutil.copytree(source, repo / "snapshots" / "abc123")


@pytest.mark.parametrize("repo_id", ["bert-base-uncased", "gpt2", "EleutherAI/pythia-160m"])
def test_hub_ids_with_or_without_owner_resolve_from_the_local_cache(hub_cache, model_dir, repo_id):
    _cache_model(hub_cache, repo_id, model_dir)
    resolved = resolve(repo_id)
    assert resolved.kind == "hf" and resolved.path.parent.parent.name == f"models--{repo_id.replace('/', '--')}"


@pytest.mark.parametrize("name, hint", [("bert-base-uncased", "hf download bert-base-uncased"),
                                        ("gemma3-270", "did you mean gemma3-270m?"),
                                        ("smollm2", "did you mean smollm2-135m?"),
                                        ("tiny_llama", "did you mean tiny-llama?")])
def test_an_owner_less_name_not_in_the_cache_says_what_to_do(hub_cache, name, hint):
    with pytest.raises(ValueError, match=rf"^models: unknown model '{name}'") as err:
        resolve(name)
    assert hint in str(err.value)


# --------------------------------------------------------------------------- files honour the umask


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640), (0o002, 0o664), (0o077, 0o600)])
def test_results_files_honour_the_umask(tmp_path, umask, mode):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    previous = __import__("os").umask(umask)
    try:
        fig = plt.figure()
        path = results.save_run(tmp_path, "ch", {}, [], {"a": 1}, 0.0, figures={"ch_fig": fig})
        plt.close(fig)
        results.write_json_atomic(tmp_path / "other.json", {"b": 2})
    finally:
        __import__("os").umask(previous)
    for file in (path, tmp_path / "figures" / "ch_fig.png", tmp_path / "other.json"):
        assert file.stat().st_mode & 0o777 == mode, file


# --------------------------------------------------------------------------- Ctrl-C: one line, nothing half-written


def test_ctrl_c_in_the_accept_cli_prints_one_line(tmp_path, monkeypatch, capsys):
    from kvutils.cache import accept

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(accept, "accept_many", interrupted)
    out = tmp_path / "a.json"
    code = accept.main(["--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--prefill", "16", "--decode", "8",
                        "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 130 and err.count("\n") == 1 and "interrupted" in err and "Traceback" not in err
    assert not out.exists()


def test_ctrl_c_in_the_chapters_runner_prints_one_line(monkeypatch, capsys):
    from kvutils.book import chapters

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(chapters, "run_chapter", interrupted)
    assert chapters.cli(["01", "--no-pages"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interrupted" in err


# --------------------------------------------------------------------------- each chapter's plan, as a reader mistypes it
#
# Found by trying 400+ bad inputs as a new user would: each was accepted silently, or failed with a
# bare Python error, before these checks.

PLANS = {
    "01": "kvutils.studies.cache_exactness",
    "03": "kvutils.studies.sense_probes.study", "04": "kvutils.studies.cache_approximations.study",
         "05": "kvutils.studies.qwen3_switch.study"}


def _plan(chapter: str, **overrides):
    """The chapter's plan (its first cell's checks) on the quick profile with `overrides`."""
    import importlib

    from kvutils.book.chapters import QUICK

    name = NOTEBOOKS[chapter]
    return importlib.import_module(PLANS[chapter]).plan(DECLARED[name](**{**QUICK[name], **overrides}))


def _senses_variant(tmp_path: Path, change) -> str:
    raw = json.loads((REPO_ROOT / "data" / "senses.json").read_text(encoding="utf-8"))
    change(raw)
    path = tmp_path / "senses.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


PLAN_CASES = [
    ("01", dict(dtypes="float32,float32"), "dtypes: float32 given more than once"),
    ("04", dict(contexts="32,32"), "contexts: 32 given more than once"),
    ("01", dict(device="meta"), "device: 'meta' is not a device kvutils computes on"),
    ("01", dict(device="ipu"), "device: 'ipu' is not a device kvutils computes on"),
    ("01", dict(corpus="no/such/file.jsonl"), "corpus: 'no/such/file.jsonl' does not exist"),
    ("01", dict(senses_file=lambda raw: raw.update(prefix_template="A {thing} {word}")),
     '"prefix_template" must be a string whose one field is "{word}"'),
    ("01", dict(senses_file=lambda raw: raw.update(prefix_template="The {word} {0}")),
     '"prefix_template" must be a string whose one field is "{word}"'),
    ("01", dict(senses_file=lambda raw: raw["words"].append(raw["words"][0])), "word 'bank': given twice"),
    ("03", dict(repeat_template="The {word!r}"), "formats ['word']; write plain fields"),
    ("03", dict(repeat_template="{continuation} The {word}"), "must contain {prefix} exactly once"),
    ("03", dict(repeat_template="{prefix}{continuation} The {word}s"),
     "with repeat_template '{prefix}{continuation} The {word}s': 'bank' is not one token"),
    ("04", dict(frontier_models=0), "frontier_models must be one comma-separated string"),
    ("04", dict(ops=";;"), "ops: ';;' names no operation"),
    ("04", dict(frontier_ops=" ; "), "frontier_ops: ' ; ' names no operation"),
    ("04", dict(ops="chunk_reuse:chunk=64"), "ops: chunk_reuse: chunk=64 is not allowed"),
    ("04", dict(frontier_ops="snapkv:compression_ratio=0.5,window=64"), "frontier_ops: snapkv: window=64 is not allowed"),
    ("04", dict(ops="window:size=16,size=8"), "window: size is given twice"),
    ("05", dict(alpha=float("inf")), "alpha must be a number > 0, got inf"),
    ("05", dict(lr="0.003,tiny-qwen:0.001"), "lr: 'tiny-qwen' is neither a model of this run (tiny-qwen3)"),
    ("05", dict(marker=" "), "marker: ' ' is only white space"),
    ("05", dict(exact_examples=9), "exact_examples: 9 is more than the 8 held-out examples of tiny-qwen3"),
    ("05", dict(device="auto"), "device: 'auto' (a model spread over several devices) is not supported by chapter 5"),
    ("05", dict(bench_tokens=1000), "bench_tokens: 1000 is more than tiny-qwen3's context of 512 tokens"),
    ("05", dict(passage_tokens=600, n_train=4, n_heldout=2, exact_examples=2),
     "passage_tokens, candidate_tokens: an example of tiny-qwen3 has"),
    ("05", dict(n_train=10**6), "lower passage_tokens and candidate_tokens or the number of examples (n_train, n_heldout)"),
    ("04", dict(contexts="5000"), "contexts: 5000 is longer than tiny-llama handles (512 tokens"),
    ("04", dict(prefill=500), "models: tiny-llama handles at most 512 tokens, but the parameters need 533"),
]


@pytest.mark.parametrize("chapter, overrides, words", PLAN_CASES,
                         ids=[f"{c}-{next(iter(o))}-{i}" for i, (c, o, _) in enumerate(PLAN_CASES)])
def test_each_chapter_plan_names_what_is_wrong(tmp_path, no_model_loads, chapter, overrides, words):
    overrides = {k: _senses_variant(tmp_path, v) if callable(v) else v for k, v in overrides.items()}
    with pytest.raises(ValueError) as err:
        _plan(chapter, **overrides)
    assert words in str(err.value)
    parameter = next(iter(overrides))
    assert parameter in str(err.value) or "senses_file" in str(err.value) or "prefix_template" in str(err.value)


@pytest.mark.parametrize("chapter, overrides", [
    ("04", dict(ops="window:size=16, sinks=4")), ("05", dict(lr="0.003,gemma3-270m:0.001")),
    ("03", dict(repeat_template="{prefix}{continuation} Again, the {word}")), ("01", dict(dtypes="float64")),
    # no frontier model: frontier_ops are not run, so their window need not fit a short prefill
    ("04", dict(frontier_models="", frontier_ops="snapkv:compression_ratio=0.5,window=64", prefill=48, decode=16)),
])
def test_valid_unusual_values_still_plan(no_model_loads, chapter, overrides):
    assert _plan(chapter, **overrides)


@pytest.mark.parametrize("tool, argv, words", [
    ("accept", ["--model", "tiny-llama", "--ops", "exact", "--docs", "pydoc"],
     "unrecognized argument --ops (did you mean --op?)"),
    ("accept", ["--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--ndocs", "2"],
     "unrecognized argument --ndocs (did you mean --n-docs?)"),
    ("chapters", ["01", "--result-dir", "x"], "unrecognized argument --result-dir (did you mean --results-dir?)"),
    ("bench", ["--quik"], "unrecognized argument --quik (did you mean --quick?)"),
    ("bench", ["--frobnicate"], "unrecognized argument --frobnicate; the flags are"),
])
def test_a_misspelt_flag_is_named_before_a_missing_one(capsys, no_model_loads, tool, argv, words):
    import importlib

    main = importlib.import_module(f"kvutils.{tool}").main
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    assert words in capsys.readouterr().err


def test_abbreviated_flags_still_work(tmp_path, capsys):
    from kvutils.cache import accept

    assert accept.main(["--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--pre", "16", "--dec", "8",
                        "--n-docs", "1"]) == 0
    assert "prefill 16 tokens, decode 8 tokens" in capsys.readouterr().out
