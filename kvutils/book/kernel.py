"""The kernel papermill starts for a chapter: over IPC (Unix sockets in the temporary folder)
rather than TCP on localhost. A TCP kernel without CurveZMQ keys prints ipykernel's warning that
it runs "over TCP without encryption" at every start; over IPC nothing of the kernel's traffic
leaves the machine's file system, and the warning has nothing to say.

The sockets are files, `kvutils-kernel-<pid>-<id>-<port>` (pid: the runner that started the
kernel). jupyter_client removes them when the kernel shuts down; a runner killed by SIGKILL leaves
them behind, so each start removes those whose runner is dead."""
from __future__ import annotations

import os
import re
import tempfile
import uuid
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum, default

from kvutils.core.results import writer_alive

PREFIX = "kvutils-kernel-"
SOCKET = re.compile(rf"^{PREFIX}(?P<pid>\d+)-[0-9a-f]{{16}}-\d+$")  # one file per channel: -<port>


def remove_stale_sockets(folder: str | Path | None = None) -> list[Path]:
    """Delete the socket files in `folder` (default: the temporary folder) of kernels whose runner
    is no longer alive (kvutils.core.results.writer_alive: a dead pid, or a reused one a day later);
    return them. Files of live runners, and any other file, stay."""
    folder = Path(folder or tempfile.gettempdir())
    removed = []
    for path in folder.glob(f"{PREFIX}*"):
        match = SOCKET.match(path.name)
        if match and not writer_alive(int(match["pid"]), path):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


class IpcKernelManager(AsyncKernelManager):
    """nbclient's kernel manager with `transport` "ipc" by default, each kernel's sockets under a
    name of its own. jupyter_client's default names them kernel-ipc-1, -2, … in the working folder,
    so two chapters run side by side (make -j2, same folder) could bind and connect each other's
    sockets: seen as "Invalid Signature" from the kernels."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _unique_ip(self) -> str:
        remove_stale_sockets()  # a start after a SIGKILL: the killed runner's sockets go
        return str(Path(tempfile.gettempdir()) / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:16]}")

    async def _async_interrupt_kernel(self) -> None:
        """jupyter_client sends a kernel SIGINT before every shutdown request; one that arrives
        between cells makes ipykernel log "ERROR | KeyboardInterrupt caught in kernel." in a build
        that went well. A shutdown asks by message (then SIGTERM, then SIGKILL, as jupyter_client
        does); a Ctrl-C still reaches a running cell (`kvutils.core.interrupt`)."""
        if not self.shutting_down:
            await super()._async_interrupt_kernel()
