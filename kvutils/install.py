"""`python -m kvutils.install`: installs and converts the embedded models (kvutils.models.install).

Importing it gives kvutils.models.install's public functions under their old name."""
import sys

if __name__ == "__main__":
    from kvutils.core.interrupt import quiet_while_starting

    quiet_while_starting()  # before the seconds of importing torch: Ctrl-C meanwhile ends with one line
    from kvutils.models.install import cli

    sys.exit(cli())

from kvutils.models.install import main  # noqa: E402,F401
