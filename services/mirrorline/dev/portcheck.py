"""Which local TCP ports are free, and which process holds one that is not (Linux).

The demo starts `mirrorline run` on fixed default ports; when one is taken (a previous demo
still running, another program on 7100) the services fail to bind and the demo used to show
zeros for minutes with the cause buried in a log file. These helpers let it choose free ports
up front, or say at once which port is held and by what.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a listener could bind `host:port` now. Listeners set SO_REUSEADDR (gRPC,
    asyncio servers, Tansu), so the check does too: a port whose last connections are
    still in TIME_WAIT is free to them."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def holder(port: int) -> str:
    """`pid N (command line)` of the process listening on `port`, as far as /proc shows it
    (other users' processes are invisible without privileges), or a neutral phrase."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1],
                                                              16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    if not inodes:
        return "an unknown process"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                command = raw.replace(b"\0", b" ").decode(errors="replace").strip()
                return f"pid {pid} ({command[:120]})"
        except OSError:
            continue
    return "a process this user cannot see"
