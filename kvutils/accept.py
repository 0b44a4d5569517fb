"""`python -m kvutils.accept`: the acceptance test of a cache operation on a model (kvutils.cache.accept).

Importing it gives kvutils.cache.accept's public functions under their old name."""
import sys

if __name__ == "__main__":
    from kvutils.core.interrupt import quiet_while_starting

    quiet_while_starting()  # before the seconds of importing torch: Ctrl-C meanwhile ends with one line
    from kvutils.cache.accept import cli

    sys.exit(cli())

from kvutils.cache.accept import accept, accept_many, main  # noqa: E402,F401
