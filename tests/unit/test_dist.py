"""`make dist`: the built HTML as one zip, every file under one folder named as the archive, written
whole; a folder without a built book is refused, naming it (the offline reading of the unpacked
archive is tests/book/test_browser.py's)."""
import zipfile

import pytest

from kvutils.book import dist


def _site(root):
    (root / "_static").mkdir(parents=True)
    (root / "index.html").write_text('<a href="book/intro.html">intro</a>')
    (root / "book").mkdir()
    (root / "book" / "intro.html").write_text('<link href="../_static/theme.css">')
    (root / "_static" / "theme.css").write_text("body {}")
    return root


def test_the_archive_holds_every_file_under_its_own_folder(tmp_path):
    html = _site(tmp_path / "html")
    archive = dist.pack(html, tmp_path / "dist" / "kv-cache-book-abc1234.zip")
    names = zipfile.ZipFile(archive).namelist()
    top = "kv-cache-book-abc1234"
    assert sorted(names) == [f"{top}/_static/theme.css", f"{top}/book/intro.html", f"{top}/index.html"]
    zipfile.ZipFile(archive).extractall(tmp_path / "out")
    assert (tmp_path / "out" / "kv-cache-book-abc1234" / "book" / "intro.html").read_text() == \
        (html / "book" / "intro.html").read_text()
    assert [p.name for p in archive.parent.iterdir()] == [archive.name]  # no partial file left


def test_a_folder_without_a_built_book_is_refused(tmp_path):
    (tmp_path / "html").mkdir()
    with pytest.raises(ValueError, match="html: .* has no index.html; build the book first"):
        dist.pack(tmp_path / "html", tmp_path / "book.zip")
    with pytest.raises(SystemExit):
        dist.main([str(tmp_path / "html"), str(tmp_path / "book.zip")])
    assert not (tmp_path / "book.zip").exists()
