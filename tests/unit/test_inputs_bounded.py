"""Inputs that used to hang, exhaust memory or fail late (issue 21): every input file is opened
through one reader (regular files only, never a blocking read, a size limit, a bounded prefix of
a document), an operation's requirements are checked when it is parsed and a refused one makes the
command line exit non-zero, the converted-model cache is checked before use, messages name what is
wrong, and one chapter has one writer per results folder at a time.

Nothing here times anything: a hang is caught by an alarm that fails the test in seconds.
"""
import contextlib
import json
import os
import re
import signal
import socket
import time
from pathlib import Path

import pytest
import torch
from conftest import load_cached

from kvutils.book import chapters
from kvutils.book.parameters_cells import TABLE_FILE
from kvutils.cache import accept as acceptance
from kvutils.cache import registry
from kvutils.cache.methods.hf_quantized import backend_missing
from kvutils.cache.registry import parse_op
from kvutils.core import data, interrupt, params, results
from kvutils.core.paths import REPO_ROOT
from kvutils.models import converted
from kvutils.models import loading as models
from kvutils.studies import cache_exactness as exactness
from kvutils.studies.cache_approximations import study as approx_study
from kvutils.studies.parameters import DECLARED, Chapter1Parameters
from kvutils.studies.qwen3_switch import study as switch
from kvutils.studies.sense_probes import study as senses_study

HANG_S = 10  # far more than any of these checks takes; a blocking read would never end


@contextlib.contextmanager
def no_hang(seconds: int = HANG_S):
    """Fail (instead of hanging the suite) if the block has not ended after `seconds`."""
    def fail(signum, frame):
        raise AssertionError(f"still running after {seconds} s: a blocking read?")
    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _folder_with(tmp_path: Path, make) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.txt").write_text("a fine document " * 100)
    make(folder / "b.txt")
    return folder


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))  # the file stays after the socket closes
    sock.close()


def _zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


# --------------------------------------------------------------------------- files that are not files


@pytest.mark.parametrize("make, kind", [(_fifo, "a named pipe"), (_socket, "a socket"),
                                        (_zero, "a character device")])
def test_a_txt_that_is_not_a_regular_file_is_refused_by_name_at_once(tmp_path, make, kind):
    folder = _folder_with(tmp_path, make)
    with no_hang(), pytest.raises(ValueError, match=rf"^corpus: .*b\.txt is {kind}.*not a regular file"):
        data.load_corpus(str(folder))


def test_accept_with_a_pipe_among_its_docs_stops_before_any_model_loads(tmp_path, capsys, no_model_loads):
    folder = _folder_with(tmp_path, _fifo)
    with no_hang(), pytest.raises(SystemExit) as exit_:
        acceptance.main(["--model", "tiny-llama", "--op", "exact", "--docs", str(folder)])
    assert exit_.value.code == 2 and "b.txt is a named pipe (FIFO), not a regular file" in capsys.readouterr().err


def test_chapter_1_first_cell_refuses_a_pipe_in_its_corpus(tmp_path, no_model_loads):
    folder = _folder_with(tmp_path, _fifo)
    good = dict(models="tiny-llama", dtypes="float64", n_prompts=1, prompt_tokens=8, new_tokens=4,
                recompute="one_pass", batch_size=1, corpus=str(folder), senses_file="data/senses.json",
                garden_paths_file="data/garden_paths.json", device="cpu")
    with no_hang(), pytest.raises(ValueError, match=r"corpus: .*b\.txt is a named pipe"):
        exactness.plan(Chapter1Parameters(**good))


def test_a_jsonl_corpus_that_is_a_pipe_is_refused(tmp_path):
    os.mkfifo(tmp_path / "docs.jsonl")
    with no_hang(), pytest.raises(ValueError, match=r"docs\.jsonl is a named pipe"):
        data.load_corpus(str(tmp_path / "docs.jsonl"))


@pytest.mark.parametrize("loader, parameter", [(data.load_senses, "senses_file"),
                                               (data.load_garden_paths, "garden_paths_file")])
def test_a_study_file_that_is_a_device_says_so_not_file_not_found(loader, parameter):
    with no_hang(), pytest.raises(ValueError, match=rf"^{parameter}: /dev/null is a character device, not a regular file"):
        loader("/dev/null")


def test_a_dangling_link_is_named_as_one(tmp_path):
    (tmp_path / "senses.json").symlink_to(tmp_path / "gone.json")
    with pytest.raises(ValueError, match=r"senses\.json is a dangling symbolic link"):
        data.load_senses(tmp_path / "senses.json")


def test_the_reader_refuses_a_pipe_even_when_the_check_before_opening_is_skipped(tmp_path, monkeypatch):
    """The belt (a path swapped after the check): the open does not block on a pipe with no writer,
    and the opened file is checked again."""
    os.mkfifo(tmp_path / "p")
    monkeypatch.setattr(data, "check_regular", lambda *args: None)
    with no_hang(), pytest.raises(ValueError, match="named pipe"), data.open_input(tmp_path / "p", "corpus"):
        pass


# --------------------------------------------------------------------------- sizes and prefixes


def test_a_study_file_over_the_size_limit_names_the_file_and_the_limit(tmp_path, monkeypatch):
    path = tmp_path / "senses.json"
    path.write_text(json.dumps({"words": [], "pad": "x" * 5000}))
    monkeypatch.setattr(data, "MAX_FILE_BYTES", 4096)
    with pytest.raises(ValueError, match=r"^senses_file: .*senses\.json is over the limit of 4,096 bytes"):
        data.load_senses(path)


def test_a_jsonl_line_over_the_limit_is_named_with_its_number(tmp_path, monkeypatch):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": "short"}) + "\n" + json.dumps({"text": "y" * 5000}) + "\n")
    monkeypatch.setattr(data, "MAX_FILE_BYTES", 4096)
    with pytest.raises(ValueError, match=r"docs\.jsonl line 2 is over the limit of 4,096 bytes"):
        data.load_corpus(str(path))


def test_a_long_txt_is_read_only_to_its_prefix_and_marked_cut(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "DOC_PREFIX_BYTES", 10_000)
    (tmp_path / "long.txt").write_text("é word " * 50_000)  # 400 kB, a 2-byte character at the cut
    (tmp_path / "short.txt").write_text("é word " * 10)
    long, short = data.load_corpus(str(tmp_path))
    assert long.cut and not short.cut
    assert len(long.text.encode()) <= 10_000 and long.text.startswith("é word é word")
    assert "\ufffd" not in long.text  # the character cut in two is left out, not replaced


def test_a_long_jsonl_document_is_cut_the_same_way(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "DOC_PREFIX_BYTES", 10_000)
    (tmp_path / "docs.jsonl").write_text(json.dumps({"text": "word " * 50_000}) + "\n")
    (doc,) = data.load_corpus(str(tmp_path / "docs.jsonl"))
    assert doc.cut and len(doc.text.encode()) <= 10_000


class CountingTokenizer:
    """A real tokenizer that counts the characters it is given."""

    def __init__(self, tokenizer):
        self.tokenizer, self.chars = tokenizer, 0

    def __call__(self, text, **kwargs):
        self.chars += len(text)
        return self.tokenizer(text, **kwargs)


def test_only_a_bounded_prefix_of_a_long_document_is_tokenised(tmp_path):
    """A 1 MiB document whose first 49 tokens are used: well under 1 % of it reaches the tokenizer
    (today's code tokenised all of it: 4.5 GB peak for a 200 MB file)."""
    (tmp_path / "big.txt").write_text("The cache holds keys and values. " * 40_000)
    docs = data.load_corpus(str(tmp_path))
    counting = CountingTokenizer(models.load_tokenizer("smollm2-135m"))
    used, _ = acceptance.tokenize_documents(counting, docs, 49, n_docs=1)
    assert used[0][1].shape == (49,)
    assert counting.chars <= 2 * data.FIRST_CHARS_PER_TOKEN * (49 + data.TOKEN_MARGIN) + 4096
    counting.chars = 0
    data.prompts_from_corpus(counting, docs, 1, 49)
    assert counting.chars < len(docs[0].text) / 100


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m", "qwen2.5-0.5b"])
def test_tokenising_a_prefix_keeps_the_same_tokens_as_tokenising_everything(name):
    """Wrong if the prefix were cut too close: a word split at the cut would change the last tokens."""
    tokenizer = models.load_tokenizer(name)
    for doc in data.load_corpus()[:40]:
        whole = tokenizer(doc.text, add_special_tokens=True).input_ids
        for length in (1, 33, 257, 513):
            assert data.first_tokens(tokenizer, doc.text, length) == whole[:length], (doc.id, length)


def test_a_document_short_because_it_was_cut_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "DOC_PREFIX_BYTES", 2_000)
    (tmp_path / "long.txt").write_text("many words follow here " * 1_000)
    docs = data.load_corpus(str(tmp_path))
    tokenizer = models.load_tokenizer("smollm2-135m")
    with pytest.raises(ValueError, match=r"long\.txt \(\d+ tokens, read only to its first 2,000 bytes\)"):
        acceptance.tokenize_documents(tokenizer, docs, 5_000, n_docs=1)


# --------------------------------------------------------------------------- .jsonl messages


@pytest.mark.parametrize("value, kind", [(12345, "number"), (["a", "b"], "list"), (None, "null")])
def test_a_jsonl_text_that_is_not_a_string_says_so(tmp_path, value, kind):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": value}) + "\n")
    with pytest.raises(ValueError, match=rf'docs\.jsonl line 2: its "text" field is not a string \(a JSON {kind}\)'):
        data.load_corpus(str(path))


def test_a_jsonl_line_without_text_still_says_it_has_none(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(ValueError, match=r'line 1 has no "text" field'):
        data.load_corpus(str(path))


# --------------------------------------------------------------------------- out of memory is not an interruption


def test_accept_out_of_memory_is_said_as_such_not_as_interrupted(monkeypatch, capsys):
    def exhaust(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(acceptance, "accept_many", exhaust)
    status = acceptance.main(["--model", "tiny-llama", "--op", "exact", "--docs", "pydoc", "--prefill", "16",
                              "--decode", "8"])  # within tiny-llama's 512 positions, checked before the run
    err = capsys.readouterr().err
    assert status == interrupt.OUT_OF_MEMORY != interrupt.INTERRUPTED
    assert "out of memory" in err and "interrupted" not in err


def test_run_cli_reports_out_of_memory_not_interrupted(capsys):
    def main(argv):
        raise MemoryError
    assert interrupt.run_cli(main, [], "bench.json is as it was") == interrupt.OUT_OF_MEMORY
    err = capsys.readouterr().err
    assert "out of memory" in err and "interrupted" not in err


# --------------------------------------------------------------------------- operations checked when parsed


@pytest.mark.parametrize("backend", ["quanto", "hqq"])
def test_an_absent_backend_is_refused_when_the_op_is_parsed(backend, capsys, no_model_loads):
    if backend_missing(backend) is None:
        pytest.skip(f"{backend} is installed here")
    with pytest.raises(ValueError, match=rf"backend={backend} needs the"):
        parse_op(f"hf_quantized:backend={backend}")
    with pytest.raises(SystemExit) as exit_:
        acceptance.main(["--model", "tiny-llama", "--op", f"hf_quantized:backend={backend}", "--docs", "pydoc"])
    assert exit_.value.code == 2 and f"backend={backend} needs the" in capsys.readouterr().err


def test_a_cli_run_with_a_refused_op_exits_non_zero_and_names_it(tmp_path, capsys, monkeypatch):
    load_cached("tiny-gemma3", "float32")  # before the patch: load_cached itself loads through kvutils.load
    monkeypatch.setattr(models, "load", lambda name, dtype, device: load_cached(name, "float32"))
    out = tmp_path / "accept.json"
    status = acceptance.main(["--model", "tiny-gemma3", "--op", "exact", "--op", "hf_quantized:backend=fp8",
                              "--docs", "pydoc", "--n-docs", "1", "--prefill", "20", "--decode", "4",
                              "--out", str(out)])
    assert status == acceptance.NOT_ALL_SCORED != 0
    run = json.loads(out.read_text())
    assert list(run["ops"]) == ["exact"] and "sliding-attention" in run["refused"]["hf_quantized:backend=fp8"]
    assert "not scored (refused: hf_quantized:backend=fp8)" in capsys.readouterr().err


def test_the_cli_strips_a_model_name_as_the_notebooks_do(monkeypatch):
    seen = {}

    def record(model, *args, **kwargs):
        seen["model"] = model
        return {"refused": {}}
    monkeypatch.setattr(acceptance, "accept_many", record)
    monkeypatch.setattr(acceptance, "table", lambda run: "")
    assert acceptance.main(["--model", " tiny-llama ", "--op", "exact", "--docs", "pydoc", "--prefill", "16",
                            "--decode", "8"]) == 0
    assert seen["model"] == "tiny-llama"


# --------------------------------------------------------------------------- --help


def _help(capsys) -> str:
    with pytest.raises(SystemExit):
        acceptance.main(["--help"])
    return capsys.readouterr().out


def test_help_shows_each_operations_whole_first_sentence(capsys):
    text = _help(capsys)
    lines = {name: next(line for line in text.splitlines() if re.match(rf"\s+{name}[ :(]", line))
             for name in registry.OPS}
    for line in lines.values():
        summary = line.split("): ", 1)[-1] if "): " in line else line.split(": ", 1)[1]
        assert summary.endswith(".") and summary.count("(") == summary.count(")"), line  # not cut inside "(Liu et al."
    assert "asymmetric min/max rounding to 2^bits levels." in lines["quantize_kivi"]
    assert "largest attention accumulated over every query so far" in lines["h2o"]


def test_help_shows_every_flags_default(capsys):
    text = " ".join(_help(capsys).split("\nexamples:")[0].split())  # the flags' own lines, not the examples
    for flag in ("--prefill", "--decode", "--n-docs", "--no-skip-short", "--dtype", "--device", "--path", "--out",
                 "--task"):
        described = text.split(f" {flag} ", 2)[-1].split(" --", 1)[0]
        assert "default" in described, flag
    assert "(default: 256)" in text


# --------------------------------------------------------------------------- results_dir


def test_a_results_dir_that_is_a_dangling_link_is_named_as_one(tmp_path):
    (tmp_path / "r").symlink_to(tmp_path / "gone")
    with pytest.raises(ValueError, match=r"^results_dir: .*r is a symbolic link to .*gone, which does not exist"):
        results.check_output(tmp_path / "r", "ch")


@pytest.mark.parametrize("check", [lambda v: results.check_output(v, "ch"),
                                   lambda v: results.check_output_file(v + "/a.json", "results_dir"),
                                   lambda v: DECLARED["06_conclusions"].from_notebook({"results_dir": v})])
def test_a_tilde_for_an_unknown_user_names_results_dir(check):
    with pytest.raises(ValueError, match=r"^results_dir: ~nosuchuser_kv/r(/a\.json)? starts with ~nosuchuser_kv, "
                                         r"but there is no user"):
        check("~nosuchuser_kv/r")


# --------------------------------------------------------------------------- one writer per chapter results file

def _in_child(work) -> tuple[int, int, str]:
    """Run `work()` in a forked child (another process, as another run is); (pid, pipe to read, ...)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then stay alive until killed
        try:
            os.write(write, (work() or "ok").encode()[:500])
        except BaseException as err:  # noqa: BLE001 (reported to the parent)
            os.write(write, f"error: {err}".encode()[:500])
        finally:
            os.close(write)
            time.sleep(60)
            os._exit(0)
    os.close(write)
    return pid, read


def _outcome(read: int) -> str:
    with os.fdopen(read, "rb") as fh:
        return fh.read().decode()


def _end(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_a_second_run_of_a_chapter_into_a_held_folder_is_refused_with_the_pid(tmp_path):
    holder, read = _in_child(lambda: results.claim(tmp_path, "01_cache_exactness"))
    try:
        assert _outcome(read) == "ok"
        with pytest.raises(ValueError, match=rf"^results_dir: another run \(pid {holder}\) is writing "
                                             r"01_cache_exactness's results"):
            results.claim(tmp_path, "01_cache_exactness")
        results.claim(tmp_path, "04_cache_approximations")  # another chapter, same folder: the runner's lanes
        results.release(tmp_path, "04_cache_approximations")
    finally:
        _end(holder)  # as kill -9 would
    results.claim(tmp_path, "01_cache_exactness")  # a killed run leaves nothing stuck
    results.release(tmp_path, "01_cache_exactness")


def test_the_notebooks_first_cell_claims_and_save_run_releases(tmp_path):
    defaults = DECLARED["02_bert_contrast"].defaults()
    namespace = {**defaults, "results_dir": str(tmp_path)}
    folder = params.check_notebook(namespace, "02_bert_contrast", defaults)
    assert params.check_notebook(namespace, "02_bert_contrast", defaults) == folder  # a rerun of the cell in Jupyter
    other, read = _in_child(lambda: results.claim(folder, "02_bert_contrast"))
    outcome = _outcome(read)
    _end(other)
    assert f"another run (pid {os.getpid()})" in outcome
    results.save_run(folder, "02_bert_contrast", {}, [], {"x": 1}, time.time())
    again, read = _in_child(lambda: results.claim(folder, "02_bert_contrast"))
    outcome = _outcome(read)
    _end(again)
    assert outcome == "ok"


# --------------------------------------------------------------------------- the converted-model cache


@pytest.fixture(scope="module")
def real():
    """The real converted smollm2 entry: only read, never written."""
    return converted.converted_dir("smollm2-135m")


def _entry(folder: Path, real: Path, recorded: bool = True) -> Path:
    """A small converted entry: a real safetensors file, the real smollm2 tokenizer.json and config."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({"w": torch.arange(1000, dtype=torch.float32)}, str(folder / "model.safetensors"))
    for name in ("tokenizer.json", "config.json"):
        (folder / name).write_bytes((real / name).read_bytes())
    source = {"gguf": "x.gguf", "sha256": "0" * 64, **(converted.record(folder) if recorded else {})}
    (folder / converted.SOURCE).write_text(json.dumps(source))
    return folder


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "older kvutils"])
def test_an_intact_entry_passes_every_check(tmp_path, real, recorded):
    entry = _entry(tmp_path / "e", real, recorded)
    assert converted.problems(entry) == [] and converted.problems(entry, full=True) == []


@pytest.mark.parametrize("recorded", [True, False], ids=["recorded", "older kvutils"])
@pytest.mark.parametrize("name, keep, words", [
    ("model.safetensors", 1000, "model.safetensors"), ("model.safetensors", 4, "model.safetensors"),
    ("model.safetensors", 3000, "model.safetensors"),
    ("tokenizer.json", 1000, "tokenizer.json"), ("config.json", 50, "config.json")])
def test_a_cut_file_is_named(tmp_path, real, recorded, name, keep, words):
    entry = _entry(tmp_path / "e", real, recorded)
    _cut(entry / name, keep)
    found = converted.problems(entry)
    assert found and all(words in p for p in found), found


def test_a_changed_byte_is_found_only_by_the_full_check(tmp_path, real):
    entry = _entry(tmp_path / "e", real)
    raw = bytearray((entry / "model.safetensors").read_bytes())
    raw[-1] ^= 0xFF
    (entry / "model.safetensors").write_bytes(bytes(raw))
    assert converted.problems(entry) == []
    assert "model.safetensors's sha256 differs" in converted.problems(entry, full=True)[0]


def test_a_damaged_entry_is_converted_again_with_a_notice(tmp_path, real, monkeypatch):
    """On a copy under a temporary KVUTILS_CACHE: the real cache is never touched."""
    monkeypatch.setenv("KVUTILS_CACHE", str(tmp_path / "cache"))
    entry = _entry(tmp_path / "cache" / real.name, real)
    _cut(entry / "tokenizer.json", 1000)
    calls, notes = [], []

    def convert(key, entry_, target, progress):
        calls.append(target)
        return target
    monkeypatch.setattr(converted, "convert", convert)
    assert converted.converted_dir("smollm2-135m", progress=notes.append) == entry
    assert calls == [entry] and not entry.exists()  # the damaged copy went; a new conversion was asked for
    assert len(notes) == 1 and "is damaged (tokenizer.json is 1,000 bytes; " in notes[0]
    assert "converting it again" in notes[0]


def test_an_intact_entry_is_used_as_it_is(tmp_path, real, monkeypatch):
    monkeypatch.setenv("KVUTILS_CACHE", str(tmp_path / "cache"))
    entry = _entry(tmp_path / "cache" / real.name, real, recorded=False)  # as an older kvutils left it
    monkeypatch.setattr(converted, "convert", lambda *a: pytest.fail("an intact entry was converted again"))
    assert converted.converted_dir("smollm2-135m") == entry


# --------------------------------------------------------------------------- the parameter table's documented special values

PLANS = {"01_cache_exactness": exactness.plan, "02_bert_contrast": senses_study.plan,
         "03_sense_probes": senses_study.plan, "04_cache_approximations": approx_study.plan,
         "05_qwen3_switch": switch.plan}
# every special value the parameter table (CONTRIBUTING.md) documents (an empty list, "none", one value),
# with what the plan must make of it; the quick profile supplies the rest
SPECIAL = [
    ("01_cache_exactness", dict(per_step_prompts=0), lambda p: p.per_step_prompts == 0),  # "0: none"
    ("01_cache_exactness", dict(dtypes="float64"), lambda p: p.dtypes == ["float64"]),
    ("01_cache_exactness", dict(models="tiny-llama"), lambda p: p.models == ["tiny-llama"]),
    ("02_bert_contrast", dict(models="tiny-llama"), lambda p: p.models == ["tiny-llama"]),
    ("03_sense_probes", dict(encoder="tiny-bert"), lambda p: p.encoders == ["tiny-bert"]),
    ("04_cache_approximations", dict(frontier_models=""), lambda p: p.frontier_models == []),  # "" for none
    ("04_cache_approximations", dict(retrieval_models=""), lambda p: p.retrieval_models == []),  # "" for none
    ("04_cache_approximations", dict(contexts=32), lambda p: p.contexts == [32]),  # one number, as papermill passes it
    ("04_cache_approximations", dict(table2_models="tiny-llama"), lambda p: p.table2_models == ["tiny-llama"]),
    ("05_qwen3_switch", dict(eval_corpus=""), lambda p: bool(p.models[0].heldout)),  # every 4th document
    ("05_qwen3_switch", dict(marker=""), lambda p: len(p.models[0].marker_ids) >= 1),  # the task's own
    ("05_qwen3_switch", dict(k_values="L", patch_k="L"), lambda p: p.models[0].k_values == [p.models[0].n_layers]),
    ("05_qwen3_switch", dict(k_values=2, patch_k=2), lambda p: p.models[0].k_values == [2]),
    ("05_qwen3_switch", dict(steps=3, lr=0.01), lambda p: True),  # one number each, not a default then model:value
    ("05_qwen3_switch", dict(train_dtype="auto"), lambda p: True),
]
# one small model where the case is not about the models (tiny-gemma3's tokenizer takes seconds to load)
ONE_MODEL = {"01_cache_exactness": dict(models="tiny-llama"), "02_bert_contrast": dict(models="tiny-llama"),
             "03_sense_probes": dict(models="tiny-llama"),
             "04_cache_approximations": dict(models="tiny-llama", table2_models="tiny-llama",
                                             frontier_models="tiny-llama"),
             "05_qwen3_switch": {}}
SPECIAL_WORDS = re.compile(r'`""`|\bnone\b|one number|`L`|`auto`')


def _readme_rows():
    for line in (REPO_ROOT / TABLE_FILE).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.match(r"\d", cells[0]):
            yield re.findall(r"`(\w+)`", cells[0]), re.findall(r"`(\w+)`", cells[1]), cells[3] + " " + cells[4]


def test_the_walk_covers_every_special_value_the_readme_documents():
    covered = {(notebook, name) for notebook, change, _ in SPECIAL for name in change}
    missing = [(notebooks, names) for notebooks, names, text in _readme_rows() if SPECIAL_WORDS.search(text)
               and not any((nb, name) in covered for nb in notebooks for name in names)]
    assert not missing, f"{TABLE_FILE} rows with documented special values that the walk does not try: {missing}"
    single = re.findall(r"-p (\w+) (\d+)", next(line for line in (REPO_ROOT / TABLE_FILE).read_text()
                                              .splitlines() if "A single number is a valid list" in line))
    assert single and all(any(name in change and isinstance(change[name], int) for _, change, _ in SPECIAL)
                          for name, _ in single)


@pytest.mark.parametrize("notebook, change, expect", SPECIAL, ids=[f"{n[:2]}-{c}" for n, c, _ in SPECIAL])
def test_each_documented_special_value_passes_the_first_cell(notebook, change, expect, no_model_loads):
    """On the quick profile, through the notebook's own plan (its first cell's checks).
    frontier_models "" end to end is chapter 4's plot (kvutils.report.frontier), not checked here."""
    kwargs = {**chapters.QUICK[notebook], **ONE_MODEL[notebook], "device": "cpu", **change}
    assert expect(PLANS[notebook](DECLARED[notebook](**kwargs)))
