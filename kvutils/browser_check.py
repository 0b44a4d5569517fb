"""`python -m kvutils.browser_check`: opens every page of the built book in headless Chromium
(kvutils.book.browser_check).

Importing it gives kvutils.book.browser_check's public functions under their old name."""
import sys

if __name__ == "__main__":
    from kvutils.core.interrupt import quiet_while_starting

    quiet_while_starting()  # before the seconds of importing torch: Ctrl-C meanwhile ends with one line
    from kvutils.book.browser_check import cli

    sys.exit(cli())

from kvutils.book.browser_check import main  # noqa: E402,F401
