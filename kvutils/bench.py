"""`python -m kvutils.bench`: the benchmark of appendix B (kvutils.studies.performance).

Its arguments are checked before torch loads (kvutils.studies.bench_args). Importing it gives
kvutils.studies.performance's `main` under its old name (loaded when first used)."""
import importlib
import sys


def cli(argv: list[str] | None = None) -> int:
    """`python -m kvutils.bench` and `kvutils-bench`: check without torch, then run. As a command
    (argv None), a signal while starting ends it with one line, and an interrupted run ends within
    a second of saying so (kvutils.core.interrupt.exit_now)."""
    from kvutils.core import interrupt

    if argv is None:
        interrupt.quiet_while_starting()  # before the seconds of importing torch
    from kvutils.studies.bench_args import parse

    parsed = parse(argv)
    from kvutils.studies import performance

    code = performance.cli(argv, parsed)
    return interrupt.exit_now(code) if argv is None else code


def __getattr__(name: str):
    if name == "main":
        return importlib.import_module("kvutils.studies.performance").main
    raise AttributeError(f"module 'kvutils.bench' has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(cli())
