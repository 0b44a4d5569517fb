"""`python -m kvutils.accept`: the acceptance test of a cache operation on a model (kvutils.cache.accept).

Every argument is checked before torch loads (kvutils.cache.accept_args), so a typo is answered in
a fraction of a second; then kvutils.cache.accept scores. Importing this module gives
kvutils.cache.accept's public functions under their old name (loaded when first used)."""
import importlib
import sys

_PUBLIC = ("accept", "accept_many", "main")  # kvutils.cache.accept's


def cli(argv: list[str] | None = None) -> int:
    """`python -m kvutils.accept` and `kvutils-accept`: parse and check without torch, then run. As a
    command (argv None), Ctrl-C or a kill while starting ends it with one line, and an interrupted
    run ends within a second of saying so (kvutils.core.interrupt.exit_now)."""
    from kvutils.core import interrupt

    if argv is None:
        interrupt.quiet_while_starting()  # before the seconds of importing torch
    from kvutils.cache.accept_args import parse

    parsed = parse(argv)
    from kvutils.cache import accept

    code = accept.cli(argv, parsed)
    return interrupt.exit_now(code) if argv is None else code


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module("kvutils.cache.accept"), name)
    raise AttributeError(f"module 'kvutils.accept' has no attribute {name!r}")


if __name__ == "__main__":
    sys.exit(cli())
