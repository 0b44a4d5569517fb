"""The partial table of contents of `make chapter` (kvutils.book.toc): only pages that exist, no
part left empty, the left-out files named."""
from kvutils.book.toc import partial_toc

TOC = {"format": "jb-book", "root": "book/intro", "parts": [
    {"caption": "Chapters", "chapters": [{"file": "book/chapters/01_a"}, {"file": "book/chapters/02_b"}]},
    {"caption": "Appendices", "chapters": [{"file": "book/chapters/appendix_a"}]}]}


def test_only_the_pages_there_and_no_empty_part(tmp_path):
    (tmp_path / "book" / "chapters").mkdir(parents=True)
    (tmp_path / "book" / "chapters" / "02_b.ipynb").write_text("{}")
    toc, left_out = partial_toc(TOC, tmp_path)
    assert toc == {"format": "jb-book", "root": "book/intro",
                   "parts": [{"caption": "Chapters", "chapters": [{"file": "book/chapters/02_b"}]}]}
    assert left_out == ["book/chapters/01_a", "book/chapters/appendix_a"]


def test_nothing_built_leaves_the_root_alone(tmp_path):
    toc, left_out = partial_toc(TOC, tmp_path)
    assert toc == {"format": "jb-book", "root": "book/intro"} and len(left_out) == 3
