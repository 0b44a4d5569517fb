"""The kernel papermill starts for a chapter: over IPC (Unix sockets in Jupyter's runtime folder)
rather than TCP on localhost. A TCP kernel without CurveZMQ keys prints ipykernel's warning that
it runs "over TCP without encryption" at every start; over IPC nothing of the kernel's traffic
leaves the machine's file system, and the warning has nothing to say."""
from __future__ import annotations

from jupyter_client.manager import AsyncKernelManager
from traitlets import CaselessStrEnum


class IpcKernelManager(AsyncKernelManager):
    """nbclient's kernel manager with `transport` "ipc" by default."""

    transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
