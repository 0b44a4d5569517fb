"""`python -m kvutils.bench`: the benchmark of appendix B (kvutils.studies.performance).

Importing it gives kvutils.studies.performance's public functions under their old name."""
import sys

if __name__ == "__main__":
    from kvutils.core.interrupt import quiet_while_starting

    quiet_while_starting()  # before the seconds of importing torch: Ctrl-C meanwhile ends with one line
    from kvutils.studies.performance import cli

    sys.exit(cli())

from kvutils.studies.performance import main  # noqa: E402,F401
