"""Every chapter page and the conclusions, as built from the quick book (issue 50): each opens with its
"What this chapter finds" box and keeps within its budget of visible prose (words outside tables and
collapsed blocks; sentences of median <= 22 words, none over 50). `python -m kvutils.book.page_text
_build/html` prints the same measure of a full build."""
import pytest

from kvutils.book import page_text

pytestmark = pytest.mark.slow  # the quick book, built


def test_every_budgeted_page_opens_with_its_findings_and_keeps_its_budget(built_book):
    _, html = built_book
    measured = {m.page: m for m in page_text.measure_site(html) if page_text.budget_for(m.page)}
    assert len(measured) == len(page_text.BUDGETS), sorted(measured)  # chapters 1-5 and the conclusions
    broken = {page: page_text.violations(m) for page, m in measured.items() if page_text.violations(m)}
    assert not broken, page_text.table(list(measured.values()))
