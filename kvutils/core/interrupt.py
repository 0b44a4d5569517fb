"""Ctrl-C and SIGTERM for the command-line tools: one line on stderr, exit status 130, and no
traceback. Every results file is written as one unit (kvutils.core.results), so there is nothing to
repair after either signal.

SIGTERM (`kill`, a CI time-out, a job scheduler) would otherwise end Python at once, skipping every
`finally`: the chapters runner's lanes and papermill's kernels would run on, orphaned, and
temporary files would stay. Here it raises KeyboardInterrupt, as Ctrl-C does.

With `children=True` (the chapters runner, whose kernels and lanes are child processes) a signal
does not stop this process at once. jupyter_client starts each kernel in a session of its own, so
a terminal's Ctrl-C does not reach it: this process sends it SIGINT, the kernel fails its cell
with KeyboardInterrupt, papermill reports that here, and this process ends as after any
interrupted cell. Stopping at once instead would shut the kernel down in the middle of that cell,
and the kernel would print a traceback of its own. Children in this process group (the runner's
lanes) got the terminal's SIGINT themselves; a SIGTERM is passed on to them as SIGTERM (SIGINT is
ignored by a background job's children). Whatever has not ended after CHILDREN_GRACE_S, or at a
second signal, is interrupted here.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

INTERRUPTED = 130  # the shell's status for a run ended by SIGINT
OUT_OF_MEMORY = 1  # a MemoryError: said as such, never reported as an interruption
CHILDREN_GRACE_S = 10.0  # time for interrupted children to end by themselves before this process stops


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _stop_while_starting(signum, frame):
    print("interrupted while starting; nothing was written", file=sys.stderr)
    raise SystemExit(INTERRUPTED)


def quiet_while_starting() -> None:
    """A command (`python -m kvutils.<tool>`) spends seconds importing torch and transformers before
    its `main` sets its own handlers: called first by the command's module (kvutils/<tool>.py),
    this makes Ctrl-C or SIGTERM end it with one line meanwhile, too (a SIGINT ignored by a
    background job stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGTERM, _stop_while_starting)
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _stop_while_starting)


def _grace_running() -> bool:
    return signal.getitimer(signal.ITIMER_REAL)[0] > 0


def _after_children(signum: int):
    """A handler of `signum` that lets the child processes end first (see the module's docstring)."""

    def handler(received, frame):
        import psutil

        children = psutil.Process().children()
        if not children or _grace_running():
            raise KeyboardInterrupt
        group = os.getpgid(0)
        for child in children:
            with contextlib.suppress(psutil.Error, OSError):
                if os.getpgid(child.pid) != group:  # a kernel, in its own session
                    child.send_signal(signal.SIGINT)
                elif signum == signal.SIGTERM:  # a lane, which the terminal's SIGINT reached
                    child.send_signal(signal.SIGTERM)
        signal.signal(signal.SIGALRM, _raise_interrupt)
        signal.setitimer(signal.ITIMER_REAL, CHILDREN_GRACE_S)

    return handler


def _cancel_grace() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.setitimer(signal.ITIMER_REAL, 0)


@contextlib.contextmanager
def signals_as_interrupt(children: bool = False) -> Iterator[None]:
    """Within the block, SIGTERM raises KeyboardInterrupt in the main thread, as SIGINT does; with
    `children`, both wait for the child processes first. Signal handlers can only be set in the
    main thread; elsewhere the block changes nothing. A SIGINT that was ignored when the process
    started (a background job) stays ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    names = (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)
    previous = {name: signal.getsignal(name) for name in names}
    if previous[signal.SIGINT] is _stop_while_starting:  # started: Ctrl-C raises KeyboardInterrupt again
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _after_children(signal.SIGTERM) if children else _raise_interrupt)
    if children and previous[signal.SIGINT] is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _after_children(signal.SIGINT))
    try:
        yield
    finally:
        _cancel_grace()
        for name, handler in previous.items():
            signal.signal(name, handler)


def exit_now(code: int) -> int:
    """A command's exit after an interrupt: once its one line is out, end at once. Python's own
    shutdown would then spend seconds freeing a loaded model and torch's thread pools (2-5 s
    measured after SIGTERM, with the process still listed), which a scheduler's kill or a second
    Ctrl-C must not have to wait for. Every `finally` has run by then (temporary files are gone,
    results files were replaced whole or not at all), so nothing is lost. Other codes: returned."""
    if code != INTERRUPTED:
        return code
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None, kept: str,
            children: bool = False) -> int:
    """`main(argv)`'s exit status; on Ctrl-C or SIGTERM, one line "interrupted; <kept>" and 130;
    on running out of memory, one line saying so and 1."""
    with signals_as_interrupt(children):
        try:
            return main(argv) or 0
        except KeyboardInterrupt:
            _cancel_grace()
            print(f"interrupted; {kept}", file=sys.stderr)
            return INTERRUPTED
        except MemoryError:
            _cancel_grace()
            print(f"out of memory: the run needs more than this machine allows; {kept}", file=sys.stderr)
            return OUT_OF_MEMORY
