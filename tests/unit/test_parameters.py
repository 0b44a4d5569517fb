"""Each notebook parameter is declared once (kvutils.studies.parameters): the notebooks' parameters
cells, the README's table, the plans' signatures and the quick profile must agree with the
declarations, and what a notebook's first cell makes of its namespace is what the results record."""
import dataclasses
import inspect
import json
import re
import shutil

import pytest

from kvutils.book import chapters, parameters_cells
from kvutils.core.catalog import NOTEBOOKS, PAGES
from kvutils.core.declared import SIMPLE, Declared, param
from kvutils.core.paths import REPO_ROOT
from kvutils.models.loading import DTYPES
from kvutils.studies import cache_exactness
from kvutils.studies import parameters as declared
from kvutils.studies.cache_approximations import study as approx_study
from kvutils.studies.qwen3_switch import study as switch
from kvutils.studies.sense_probes import study as senses_study

PLANS = {"01_cache_exactness": (cache_exactness.plan, "Chapter1Parameters"),
         "02_bert_contrast": (senses_study.plan, "Chapter2Parameters | Chapter3Parameters"),
         "03_sense_probes": (senses_study.plan, "Chapter2Parameters | Chapter3Parameters"),
         "04_cache_approximations": (approx_study.plan, "Chapter4Parameters"),
         "05_qwen3_switch": (switch.plan, "Chapter5Parameters")}


def test_one_declaration_per_notebook_in_the_books_order():
    assert list(declared.DECLARED) == [*NOTEBOOKS.values(), *PAGES.values()]
    assert all(cls.NOTEBOOK == notebook for notebook, cls in declared.DECLARED.items())


@pytest.mark.parametrize("notebook", list(declared.DECLARED))
def test_the_notebooks_parameters_cell_is_its_declaration(notebook):
    """Catches a parameter added, removed, renamed, reordered or re-defaulted in one place only."""
    nb = json.loads(parameters_cells.notebook_path(notebook).read_text(encoding="utf-8"))
    assert "".join(parameters_cells.parameters_cell(nb)["source"]) == declared.DECLARED[notebook].cell_source()
    assert notebook not in parameters_cells.stale_cells()


def test_the_readme_table_is_generated_from_the_declarations():
    readme = (REPO_ROOT / parameters_cells.TABLE_FILE).read_text(encoding="utf-8")
    assert parameters_cells.with_table(readme) == readme, "run python -m kvutils.book.parameters_cells --write"
    table = readme.split(parameters_cells.START)[1].split(parameters_cells.END)[0]
    for cls in declared.DECLARED.values():  # every parameter has a row, with what it means and allows
        for name in cls.names():
            assert f"`{name}`" in table
    for f in dataclasses.fields(declared.Chapter5Parameters):
        assert f.metadata["row"] or (f.metadata["meaning"] and f.metadata["allowed"]), f.name


def test_rows_merge_only_where_the_notebooks_declare_them_alike():
    table = parameters_cells.readme_table().splitlines()
    all_rows = [row for row in table if row.startswith("| all |")]
    assert [row.split(" | ")[1] for row in all_rows] == ["`results_dir`", "`device`"]  # every chapter, first
    shared = [row for row in table if row.startswith("| 2 `02_bert_contrast`, 3 `03_sense_probes` |")]
    assert [row.split(" | ")[1] for row in shared] == ["`models`", "`encoder`", "`senses_file`", "`batch_size`"]
    assert "| 4 `04_cache_approximations` | `prefill`, `decode` | cached tokens, then teacher-forced tokens | `256`, `256` |" \
        in parameters_cells.readme_table()


@pytest.mark.parametrize("notebook", list(PLANS))
def test_each_plan_takes_its_declaration(notebook):
    plan, annotation = PLANS[notebook]
    signature = inspect.signature(plan)
    assert [str(p.annotation) for p in signature.parameters.values()] == [annotation]
    assert declared.DECLARED[notebook].__name__ in annotation


@pytest.mark.parametrize("notebook", list(chapters.QUICK))
def test_the_quick_profile_names_declared_parameters(notebook):
    assert set(chapters.QUICK[notebook]) <= set(declared.DECLARED[notebook].names())
    declared.DECLARED[notebook](**chapters.QUICK[notebook])  # and its values pass the checks


@pytest.mark.parametrize("cls", list(declared.DECLARED.values()))
def test_defaults_are_immutable_and_pass_their_own_checks(cls):
    defaults = cls.defaults()
    assert all(isinstance(v, SIMPLE) for v in defaults.values())
    assert cls().as_dict() == defaults and list(cls().as_dict()) == cls.names()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cls().results_dir = "elsewhere"


def test_every_parameters_cell_is_one_papermill_can_read():
    """papermill reads `name = value  # comment` and skips, with a warning only, a line holding a
    second "=" (stop 54's CI: `at n = 16` in chapter 4's frontier_docs); --write refuses one."""
    assert parameters_cells.unreadable_lines("x = 1  # n = 16") == ["x = 1  # n = 16"]
    assert parameters_cells.unreadable_lines("# Parameters\nx = 1  # one\ny = \"a\"  # two") == []
    for notebook, cls in declared.DECLARED.items():
        assert parameters_cells.unreadable_lines(cls.cell_source()) == [], notebook


def test_the_write_command_refuses_a_cell_papermill_cannot_read(monkeypatch, tmp_path):
    class Unreadable:
        @staticmethod
        def cell_source():
            return "# Parameters\nfrontier_docs = 16  # at n = 16 a verdict"

    monkeypatch.setattr(parameters_cells, "DECLARED", {"04_cache_approximations": Unreadable})
    with pytest.raises(ValueError, match="04_cache_approximations: papermill cannot read.*n = 16"):
        parameters_cells.write_cells(tmp_path)


def test_a_mutable_default_is_refused():
    with pytest.raises(TypeError, match="must be one of"):
        param([1, 2], "a list")


@pytest.mark.parametrize("cls, name, value, message", [
    (declared.Chapter1Parameters, "batch_size", 0, "batch_size must be >= 1, got 0"),
    (declared.Chapter1Parameters, "recompute", "twice", "recompute: 'twice' is not allowed"),
    (declared.Chapter3Parameters, "explorer_layer", 0, "explorer_layer must be >= 1, got 0"),
    (declared.Chapter4Parameters, "skip_short", "yes", "skip_short must be True or False, got 'yes'"),
    (declared.Chapter4Parameters, "contexts", "1,x", "contexts must be integers separated by commas"),
    (declared.Chapter5Parameters, "device", "auto", "device: 'auto' (a model spread over several devices) is not supported"),
    (declared.Chapter5Parameters, "bench_tokens", 7, "bench_tokens must be >= 8, got 7"),
    (declared.ConclusionsParameters, "near_exact_pct", 0, "near_exact_pct must be in (0, 100], got 0"),
])
def test_a_bad_value_is_refused_when_the_parameters_are_made(cls, name, value, message, no_model_loads):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        cls(**{name: value})


def test_the_first_cell_records_what_it_was_given(tmp_path, no_model_loads):
    """from_notebook: papermill's values as given (a -p 8 arrives as the int 8), results_dir as the
    folder it checked; the declaration's other values are the cell's."""
    cls = declared.Chapter1Parameters
    namespace = {**cls.defaults(), "n_prompts": 8, "my_variable": 1, "results_dir": str(tmp_path / "r"),
                 "In": ["# Parameters\nn_prompts = 8\n"]}
    recorded = cls.from_notebook(namespace).as_dict()
    assert recorded == {**cls.defaults(), "n_prompts": 8, "results_dir": str(tmp_path / "r")}
    assert list(recorded) == cls.names()


@pytest.mark.parametrize("argv, words", [
    (["01", "-p", "n_promts", "4", "--no-pages"], "n_promts: not a parameter of 01_cache_exactness (did you mean n_prompts?)"),
    (["04", "-p", "frontier_doc", "4", "--no-pages"], "(did you mean frontier_docs?)"),
])
def test_a_misspelt_name_given_to_the_runner_names_the_closest(argv, words, capsys, no_model_loads):
    with pytest.raises(SystemExit) as stop:
        chapters.main(argv)
    assert stop.value.code == 2 and words in capsys.readouterr().err


def test_the_write_command_rewrites_only_a_stale_parameters_cell(tmp_path):
    """On a copy of the notebooks and README: an edited cell and a hand-edited table row are put
    back as the declarations say, the rest of each file byte for byte as it was."""
    shutil.copytree(REPO_ROOT / "notebooks", tmp_path / "notebooks")
    readme = (REPO_ROOT / parameters_cells.TABLE_FILE).read_text(encoding="utf-8")
    edited = readme.replace("| prompts decoded together |", "| prompts |")
    (tmp_path / parameters_cells.TABLE_FILE).write_text(edited, encoding="utf-8")
    path = parameters_cells.notebook_path("04_cache_approximations", tmp_path)
    original = path.read_text(encoding="utf-8")
    nb = json.loads(original)
    cell = parameters_cells.parameters_cell(nb)
    cell["source"] = [line.replace("n_docs = 16", "n_docs = 12") for line in cell["source"]]
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    assert parameters_cells.stale_cells(tmp_path) == ["04_cache_approximations"]
    assert parameters_cells.write_cells(tmp_path) == ["04_cache_approximations"]
    assert parameters_cells.write_readme(tmp_path)
    assert path.read_text(encoding="utf-8") == original
    assert (tmp_path / parameters_cells.TABLE_FILE).read_text(encoding="utf-8") == readme
    assert parameters_cells.stale_cells(tmp_path) == [] and not parameters_cells.write_readme(tmp_path)


def test_chapter_5_has_a_tolerance_for_every_dtype_it_allows():
    assert list(switch.TOLERANCE) == list(DTYPES)


def test_a_declaration_reads_its_cell_text_from_its_fields():
    @dataclasses.dataclass(frozen=True)
    class Example(Declared):
        NOTEBOOK = "09_example"
        EXAMPLE = "-p n 3"
        n: int = param(2, "how many ({notebook})", meaning="count", allowed="≥ 1")
        name: str = param("a", "a name", row="n")

    assert Example.cell_source() == ('# Parameters (papermill overrides any of these: papermill ... -p n 3)\n'
                                     'n = 2  # how many (09_example)\nname = "a"  # a name')
    assert [(r.names, r.default) for r in Example.readme_rows()] == [("`n`, `name`", '`2`, `"a"`')]
