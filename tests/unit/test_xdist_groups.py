"""`make test`'s two workers (pytest-xdist, --dist loadgroup) get the groups tests/conftest.py gives:
the tests that share the quick book all on one worker, first, and each other module's tests together
in their order. A small suite of stand-in tests is run with the real conftest and the Makefile's flags."""
import os
import re
import shutil
import subprocess
import sys
import textwrap

from kvutils.core.paths import REPO_ROOT

MODULE = textwrap.dedent("""
    import pytest


    @pytest.fixture(scope="session")
    def quick_chapters():  # stands in for the quick book
        return None


    def test_plain_1():
        pass


    def test_book_1(quick_chapters):
        pass


    @pytest.mark.parametrize("x", [1, 2])
    def test_plain_2(x):
        pass


    def test_book_2(quick_chapters):
        pass


    def test_plain_3():
        pass
""")


def test_the_quick_book_shares_one_worker_and_each_module_stays_together(tmp_path):
    shutil.copy(REPO_ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "unit").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "unit" / f"test_{name}.py").write_text(MODULE)
    flags = [f for f in re.search(r"-m pytest (.*)", (REPO_ROOT / "Makefile").read_text()).group(1).split() if f != "-q"]
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *flags, "-W", "ignore", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}, "PYTHONPATH": str(REPO_ROOT)})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ran = re.findall(r"\[(gw\d)\] \[ *\d+%\] PASSED unit/(test_\w)\.py::(test_\w+(?:\[\d\])?)@(\w+)\s", run.stdout)
    assert len(ran) == 18, run.stdout[-3000:]
    book = [(worker, module, test) for worker, module, test, group in ran if group == "quick_book"]
    assert {test for _, _, test in book} == {"test_book_1", "test_book_2"} and len(book) == 6
    assert len({worker for worker, _, _ in book}) == 1
    book_worker = [r for r in ran if r[0] == book[0][0]]
    assert [r[3] for r in book_worker[:6]] == ["quick_book"] * 6  # the longest chain starts first
    for module in ("test_a", "test_b", "test_c"):
        plain = [(worker, test) for worker, m, test, group in ran if m == module and group != "quick_book"]
        assert [test for _, test in plain] == ["test_plain_1", "test_plain_2[1]", "test_plain_2[2]", "test_plain_3"]
        assert len({worker for worker, _ in plain}) == 1 and plain  # on one worker
