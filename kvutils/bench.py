"""`python -m kvutils.bench`: the benchmark of appendix B (kvutils.studies.performance).

Its arguments are checked before torch loads (kvutils.studies.bench_args). Importing it gives
kvutils.studies.performance's public functions under their old name."""
import sys

if __name__ == "__main__":
    from kvutils.core.interrupt import exit_now, quiet_while_starting

    quiet_while_starting()  # before the seconds of importing torch: Ctrl-C meanwhile ends with one line
    from kvutils.studies.bench_args import parse

    parsed = parse()
    from kvutils.studies.performance import cli

    sys.exit(exit_now(cli(None, parsed)))  # an interrupted run ends within a second of saying so

from kvutils.studies.performance import main  # noqa: E402,F401
