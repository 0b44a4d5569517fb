"""`python -m kvutils.results_diff`: compares every number of two results folders (kvutils.core.results_diff).

Importing it gives kvutils.core.results_diff's public functions under their old name."""
import sys

if __name__ == "__main__":
    from kvutils.core.interrupt import quiet_while_starting

    quiet_while_starting()  # before the seconds of importing torch: Ctrl-C meanwhile ends with one line
    from kvutils.core.results_diff import cli

    sys.exit(cli())

from kvutils.core.results_diff import main  # noqa: E402,F401
