"""The kernel papermill starts for a chapter: over IPC (Unix sockets in the temporary folder)
rather than TCP on localhost. A TCP kernel without CurveZMQ keys prints ipykernel's warning that
it runs "over TCP without encryption" at every start; over IPC nothing of the kernel's traffic
leaves the machine's file system, and the warning has nothing to say."""
from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum, default


class IpcKernelManager(AsyncKernelManager):
    """nbclient's kernel manager with `transport` "ipc" by default, each kernel's sockets under a
    name of its own. jupyter_client's default names them kernel-ipc-1, -2, … in the working folder,
    so two chapters run side by side (make -j2, same folder) could bind and connect each other's
    sockets: seen as "Invalid Signature" from the kernels."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)

    @default("ip")
    def _unique_ip(self) -> str:
        return str(Path(tempfile.gettempdir()) / f"kvutils-kernel-{uuid.uuid4().hex[:16]}")
