"""A rerun reads like its page (issue 50, item 8): chapter 1 executed with papermill on the quick
profile, opened as a reader would, shows its findings (no `{glue` placeholder anywhere in its text),
keeps the page's budgets, and `python -m kvutils.book.page` turns it into an HTML page."""
import json

import pytest

from kvutils.book import chapters
from kvutils.book import page as book_page


@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    root = tmp_path_factory.mktemp("rerun")
    return chapters.run_chapter("01", profile="quick", results_dir=root / "results", output_dir=root / "runs")


def _texts(notebook: dict):
    """Every text a reader can see: markdown cells and every output's text, in any format."""
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            yield "".join(cell["source"])
        for out in cell.get("outputs", []):
            yield "".join(out.get("text", ""))
            for mime, data in out.get("data", {}).items():
                if mime.startswith("text/"):
                    yield "".join(data) if isinstance(data, list) else data


@pytest.mark.slow  # about 40 s: chapter 1 on the quick profile (the fixture's run; the next test reuses it)
def test_a_rerun_shows_its_findings_not_placeholders(rerun):
    notebook = json.loads(rerun.read_text())
    texts = list(_texts(notebook))
    assert not [t for t in texts if "{glue" in t]
    box = next(c for c in notebook["cells"] if "findings_box = display(" in "".join(c["source"]))
    html = box["outputs"][0]["data"]["text/html"]
    html = "".join(html) if isinstance(html, list) else html
    assert "What this chapter finds" in html and "The cache is exact." in html  # the run filled the box in
    assert "appear here once" not in html
    record = json.loads((rerun.parent.parent / "results" / "01_cache_exactness.json").read_text())
    n = sum(by["float64"]["decode"]["n_prompts"] for by in record["numbers"].values())
    assert f"In fp64, {n} of {n} sequences matched recomputation" in html
    measured = book_page.measure(notebook)
    assert measured["words"] <= 1200 and measured["median"] <= 22 and measured["longest"] <= 50, measured


@pytest.mark.slow
def test_a_rerun_becomes_an_html_page(rerun, tmp_path):
    out = tmp_path / "page.html"
    book_page.main([str(rerun), "-o", str(out)])
    text = out.read_text()
    assert "What this chapter finds" in text and "<details>" in text and "{glue" not in text
    assert "chapter1_findings" not in text and "findings_box" not in text  # code hidden, as on the page
    with pytest.raises(FileNotFoundError, match="notebook: .*missing.ipynb does not exist"):
        book_page.to_html(tmp_path / "missing.ipynb")
