"""`python -m kvutils.rerun`: papermill's own command line, every flag as papermill takes it, for a
rerun beside the book; a failed cell ends in one line (the notebook, the cell, the error) instead of
papermill's traceback of its own internals. The kernel runs over IPC, as the book's does
(kvutils.book.kernel), so ipykernel's warning about TCP without encryption is not printed. A
refused parameter or model is said first, by the notebook's first cell
(kvutils.core.declared.say_first), so a refusal takes a few lines in all:

    python -m kvutils.rerun notebooks/01_cache_exactness.ipynb runs/01_smollm2.ipynb --log-output \\
        -p models smollm2-135m -p n_prompts 8
"""
from __future__ import annotations

import sys


def _no_cell_ends(record) -> bool:
    """papermill's --log-output says "Executing Cell N" and "Ending Cell N" around each cell: the
    first says where the run is, the second only doubles the lines before a refusal."""
    return not str(record.msg).startswith("Ending Cell")


def main(argv: list[str] | None = None) -> int:
    import functools
    import logging

    import click
    import papermill.cli
    from papermill.exceptions import PapermillExecutionError

    from kvutils.book.kernel import IpcKernelManager

    logging.getLogger("papermill").addFilter(_no_cell_ends)
    papermill_cli = papermill.cli.papermill
    # the command line calls the module's execute_notebook; every other keyword stays papermill's
    papermill.cli.execute_notebook = functools.partial(papermill.cli.execute_notebook,
                                                       kernel_manager_class=IpcKernelManager)
    try:
        papermill_cli.main(args=argv, prog_name="python -m kvutils.rerun", standalone_mode=False)
    except PapermillExecutionError as err:
        cell = next((line for line in err.source.splitlines() if line.strip()), "")
        print(f"{err.ename}: {err.evalue} (in cell In [{err.exec_count}], {cell!r}; the output notebook "
              "holds the executed copy, error included)", file=sys.stderr)
        return 1
    except click.ClickException as err:  # a usage error, as papermill's own command line says it
        err.show()
        return err.exit_code
    except click.exceptions.Abort:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
