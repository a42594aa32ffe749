"""Which local TCP ports are free, and which process holds one that is not (Linux).

The demo starts `mirrorline run` on fixed default ports; when one is taken (a previous demo
still running, another program on 7100) the services fail to bind and the demo used to show
zeros for minutes with the cause buried in a log file. These helpers let it choose free ports
up front, or say at once which port is held and by what.

A check alone is a race: two `mirrorline run` started together both find the ports free,
and both start services that then fight over them. So `run` first *claims* its ports
(`claim`) and holds the claims for its whole life: a claim is a socket bound to a name of
Linux's abstract socket namespace (`@mirrorline-port HOST:PORT`), which only one process
can bind at a time and which the kernel releases when its holder exits, however it exits
-- no file is left behind. Elsewhere the claim is an exclusive `flock` on a file in the
temp directory, released likewise.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import sys
import tempfile
from collections.abc import Iterable, Iterator
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
    return _holding(inodes)


def _holding(inodes: set[str]) -> str:
    """`pid N (command line)` of a process with one of the sockets `inodes` open."""
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


_LINUX = sys.platform.startswith("linux")


def _claim_name(host: str, port: int) -> str:
    return f"mirrorline-port {host}:{port}"


class PortTaken(Exception):
    """A port another `mirrorline run` has claimed: `port`, and `holder` as `holder()`."""

    def __init__(self, port: int, holder: str) -> None:
        super().__init__(f"port {port} is claimed by {holder}")
        self.port = port
        self.holder = holder


@contextlib.contextmanager
def claim(host: str, ports: Iterable[int]) -> Iterator[None]:
    """Claim `ports` on `host` for as long as the block runs; `PortTaken` for the first
    one another process claimed (what was claimed before it is released again).

    Ports are claimed in ascending order, so of several runs racing for overlapping ports
    one always gets them all (each loser fails at a port a winner already holds).
    """
    held: list[socket.socket | int] = []
    try:
        for port in sorted(set(ports)):
            token = _claim_one(host, port)
            if token is None:
                raise PortTaken(port, _claimant(host, port))
            held.append(token)
        yield
    finally:
        for token in held:
            if isinstance(token, socket.socket):
                token.close()
            else:
                os.close(token)


def _claim_one(host: str, port: int) -> socket.socket | int | None:
    if _LINUX:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(f"\0{_claim_name(host, port)}")
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                return None
            raise
        return sock
    import fcntl

    path = Path(tempfile.gettempdir()) / f"{_claim_name(host, port).replace(' ', '-')}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _claimant(host: str, port: int) -> str:
    """`pid N (command line)` of the process holding the claim of `host:port`."""
    if not _LINUX:
        return "another mirrorline run"
    wanted = "@" + _claim_name(host, port)
    inodes = set()
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        lines = []
    for line in lines:
        fields = line.split(None, 7)
        if len(fields) == 8 and fields[7] == wanted:
            inodes.add(f"socket:[{fields[6]}]")
    found = _holding(inodes)
    return "another mirrorline run" if found == "an unknown process" else found
