"""`python -m kvutils.chapters`: runs chapters and pages with papermill (kvutils.book.chapters).

Importing it gives kvutils.book.chapters's public functions under their old name."""
import sys

if __name__ == "__main__":
    from kvutils.core.interrupt import exit_now, quiet_while_starting

    quiet_while_starting()  # before the seconds of importing torch: Ctrl-C meanwhile ends with one line
    from kvutils.book.chapters import cli

    sys.exit(exit_now(cli()))  # an interrupted run ends within a second of saying so

from kvutils.book.chapters import main, run_chapter  # noqa: E402,F401
