"""Files, logs and endpoints (issue 19's medium and low findings), with real processes.

- a service logging at DEBUG while it authenticates with SASL/PLAIN prints no password;
- a tokens file the group or others may write is refused, readable keys are named;
- failover plans are bounded (groups per call, calls at a time) and stop at the caller's
  deadline, health answering all along;
- `/metrics` holds a bounded number of connections, and the checkpointer's is not empty;
- an address that cannot be bound ends a service with one line and exit status 2.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from helpers import Record, create_topic, produce, wait_for
from procs import checkpointer, free_port, mm2_config, replicator

from mirrorline.core.bounds import MAX_FAILOVER_GROUPS
from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import failover_pb2, failover_pb2_grpc

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING


# -- SASL/PLAIN at DEBUG -----------------------------------------------------------------------

class SaslFront:
    """A SASL/PLAIN listener in front of a local broker.

    The local brokers (Tansu) do not implement SASL, and no other broker can run here, so
    this is the one stand-in of these tests: it answers Kafka's SaslHandshake and
    SaslAuthenticate requests itself (accepting any PLAIN login, and keeping the bytes it
    was sent) and relays every other request to the real broker unchanged. The client
    under test does a real SASL/PLAIN exchange: its password is on the wire.
    """

    def __init__(self, broker: LocalBroker) -> None:
        host, port = broker.bootstrap.split(",")[0].rsplit(":", 1)
        self._broker = (host, int(port))
        self.auth_bytes: list[bytes] = []
        self._server: asyncio.Server | None = None
        self.bootstrap = ""

    async def __aenter__(self) -> SaslFront:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.bootstrap = f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        from aiokafka.protocol import admin

        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                message = await reader.readexactly(size)
                api_key, version, correlation = struct.unpack(">hhi", message[:8])
                if api_key in (17, 36):  # SaslHandshake, SaslAuthenticate
                    if api_key == 17:
                        body = getattr(admin, f"SaslHandShakeResponse_v{version}")(
                            error_code=0, enabled_mechanisms=["PLAIN"]).encode()
                    else:
                        self.auth_bytes.append(message)
                        fields = {"error_code": 0, "error_message": None,
                                  "sasl_auth_bytes": b""}
                        if version >= 1:
                            fields["session_lifetime_ms"] = 0
                        body = getattr(admin, f"SaslAuthenticateResponse_v{version}")(
                            **fields).encode()
                    reply = struct.pack(">i", correlation) + body
                    writer.write(struct.pack(">i", len(reply)) + reply)
                    await writer.drain()
                    continue
                if upstream is None:
                    upstream = await asyncio.open_connection(*self._broker)
                upstream[1].write(struct.pack(">i", size) + message)
                await upstream[1].drain()
                length = struct.unpack(">i", await upstream[0].readexactly(4))[0]
                writer.write(struct.pack(">i", length) + await upstream[0].readexactly(length))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            if upstream is not None:
                upstream[1].close()


async def test_debug_log_of_a_sasl_plain_login_shows_no_password(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Before, aiokafka's DEBUG line `Request to ...: SaslAuthenticateRequest_v0(
    sasl_auth_bytes=b'\\x00mirror\\x00<password>')` printed the password in clear."""
    password = f"pw-{os.urandom(6).hex()}"
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="mirror" password="{password}";')
    async with SaslFront(primary) as front:
        config = mm2_config({"plain": front.bootstrap, "backup": backup},
                            {"plain->backup": {"topics": unique}},
                            plain_security_protocol="SASL_PLAINTEXT",
                            plain_sasl_mechanism="PLAIN", plain_sasl_jaas_config=jaas)
        async with replicator(config, tmp_path, extra=["--log-level", "DEBUG"],
                              serving=False) as rep:
            async def logged_in() -> bool:
                rep._check_alive()
                return (any(password.encode() in m for m in front.auth_bytes)
                        and "SaslAuthenticate" in rep.log_path.read_text(errors="replace"))
            await wait_for(logged_in, 60, "no SASL/PLAIN login was made and logged")
        log = rep.log_path.read_text(errors="replace")
    assert "DEBUG" in log and "Authenticated as mirror via PLAIN" in log
    assert password not in log, [line for line in log.splitlines() if password in line]


# -- permissions of the tokens file and the keys --------------------------------------------

def make_certs(directory: Path) -> None:
    subprocess.run(["sh", str(ROOT / "deploy" / "make-certs.sh"), str(directory)], check=True,
                   capture_output=True)


def secured_config(primary: LocalBroker, backup: LocalBroker, certs: Path) -> str:
    return mm2_config(
        {"primary": primary, "backup": backup}, {"primary->backup": {"topics": "none"}},
        mirrorline_grpc_tls_certificate=str(certs / "service.pem"),
        mirrorline_grpc_tls_key=str(certs / "service.key"),
        mirrorline_grpc_tls_ca=str(certs / "ca.pem"),
        mirrorline_grpc_tls_client_auth_required="true",
        mirrorline_admin_tokens_file=str(certs / "tokens.txt"))


def mirrorline(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirrorline", *args], capture_output=True,
                          text=True, timeout=60)


def line_of(config: str, key: str) -> int:
    return next(n for n, line in enumerate(config.splitlines(), 1) if line.startswith(key))


async def test_a_tokens_file_others_may_write_is_refused_and_readable_keys_are_named(
        primary: LocalBroker, backup: LocalBroker, tmp_path: Path) -> None:
    """Before, a world-writable tokens file (whoever writes it is admin at the next start)
    and a world-readable service key were accepted without a word."""
    certs = tmp_path / "certs"
    make_certs(certs)
    config = secured_config(primary, backup, certs)
    path = tmp_path / "secured.properties"
    path.write_text(config)
    tokens = certs / "tokens.txt"
    tokens.chmod(0o666)
    line = line_of(config, "mirrorline.admin.tokens.file")
    for args in (["config", "check", str(path)],
                 ["controller", "--config", str(path), "--grpc-port", "0",
                  "--metrics-port", "-1"]):
        done = mirrorline(*args)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert f"{path}:{line}: mirrorline.admin.tokens.file: {tokens} is writable" \
            in lines[0], lines[0]

    tokens.chmod(0o644)  # as make-certs.sh leaves it: readable is fine, it holds hashes
    key = certs / "service.key"
    key.chmod(0o644)
    done = mirrorline("config", "check", str(path))
    assert done.returncode == 0, done.stderr
    warnings = [w for w in done.stderr.splitlines() if str(key) in w]
    assert len(warnings) == 1 and "mirrorline.grpc.tls.key" in warnings[0], done.stderr
    assert "readable" in warnings[0] and "PRIVATE KEY" not in done.stderr
    key.chmod(0o600)
    done = mirrorline("config", "check", str(path))
    assert done.returncode == 0 and str(key) not in done.stderr, done.stderr


# -- failover plans ------------------------------------------------------------------------------

@pytest.fixture
async def planner(primary: LocalBroker, backup: LocalBroker, unique: str,
                  tmp_path: Path) -> AsyncIterator[tuple[object, str, str]]:
    """A checkpointer whose flow is ready to plan; yields (process, flow, topic)."""
    topic = f"{unique}-plans"
    await create_topic(primary.bootstrap, topic, 8)
    await produce(primary.bootstrap, topic, [Record(b"x", partition=p) for p in range(8)])
    a, b = f"p{unique}", f"q{unique}"
    flow = f"{a}->{b}"
    # The checkpointer plans once it has read the flow's offset syncs (or offset map) to
    # the end, and it never makes a broker auto-create either topic: create the (empty)
    # offset syncs topic on the source, as a replicator of the flow would.
    await create_topic(primary.bootstrap, f"mm2-offset-syncs.{b}.internal", 1,
                       {"cleanup.policy": "compact"})
    config = mm2_config({a: primary, b: backup},
                        {flow: {"topics": topic, "groups": f"{unique}.*",
                                "admin.timeout.ms": "5000"}})
    async with checkpointer(config, tmp_path) as chk:
        stub = failover_pb2_grpc.CheckpointerStub(chk.channel)
        last: list[str] = []

        async def ready() -> bool:
            try:
                await stub.PlanFailover(failover_pb2.PlanFailoverRequest(
                    flow=flow, groups=[f"{unique}.g"]), timeout=10)
                return True
            except grpc.aio.AioRpcError as exc:
                last[:] = [f"{exc.code().name}: {exc.details()}"]
                return False
        try:
            await wait_for(ready, 30, "the checkpointer never planned", interval=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last answer {last}") from None
        yield chk, flow, unique


async def test_failover_plans_are_bounded_refused_beyond_and_stop_at_the_deadline(
        planner: tuple[object, str, str]) -> None:
    """Before, any viewer could ask for plans of any number of groups, as many at once as
    they liked, and the work went on after the caller had given up (four plans of 10 000
    groups pushed the health answer to 8.6 s)."""
    from procs import ServiceProcess

    chk, flow, unique = planner
    assert isinstance(chk, ServiceProcess)
    stub = failover_pb2_grpc.CheckpointerStub(chk.channel)
    groups = [f"{unique}.g{i}" for i in range(MAX_FAILOVER_GROUPS)]

    with pytest.raises(grpc.aio.AioRpcError) as too_many:
        await stub.PlanFailover(failover_pb2.PlanFailoverRequest(
            flow=flow, groups=[*groups, f"{unique}.one-more"]), timeout=30)
    assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"at most {MAX_FAILOVER_GROUPS}" in (too_many.value.details() or "")

    # Six plans at once: two are computed, the others are refused at once -- and health
    # answers while the two run.
    calls = [asyncio.ensure_future(stub.PlanFailover(failover_pb2.PlanFailoverRequest(
        flow=flow, groups=groups), timeout=120)) for _ in range(6)]
    healths = []
    while not all(c.done() for c in calls):
        healths.append(await chk.health())
        await asyncio.sleep(0.1)
    results = await asyncio.gather(*calls, return_exceptions=True)
    refused = [r for r in results if isinstance(r, grpc.aio.AioRpcError)]
    planned = [r for r in results if isinstance(r, failover_pb2.FailoverPlan)]
    assert healths and all(h == SERVING for h in healths), healths
    assert refused and all(r.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for r in refused), \
        [(r.code(), r.details()) for r in refused]
    assert "retry" in (refused[0].details() or "")
    assert planned and all(len(p.groups) == MAX_FAILOVER_GROUPS for p in planned)

    # A caller that gives up: the work stops (the log says so) and frees its place.
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await stub.PlanFailover(failover_pb2.PlanFailoverRequest(
            flow=flow, groups=groups), timeout=0.3)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

    async def stopped() -> bool:
        return f"failover plan of flow {flow} stopped" in chk.log_tail(200)
    await wait_for(stopped, 30, "the plan went on after the caller's deadline")
    again = await asyncio.gather(*(stub.PlanFailover(failover_pb2.PlanFailoverRequest(
        flow=flow, groups=groups[:10]), timeout=60) for _ in range(2)))
    assert all(len(p.groups) == 10 for p in again)
    assert await chk.health() == SERVING


# -- /metrics ------------------------------------------------------------------------------------

async def test_metrics_hold_a_bounded_number_of_connections_and_the_checkpointers_is_not_empty(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Before, the checkpointer's /metrics body was empty until a checkpoint was written
    (its only gauges had nothing to say), and /metrics kept every connection open for as
    long as the client wished (up to a 10 s read timeout each, without limit)."""
    from mirrorline.telemetry.prometheus import MAX_CONNECTIONS

    config = mm2_config({f"a{unique}": primary, f"b{unique}": backup},
                        {f"a{unique}->b{unique}": {"topics": f"{unique}-none"}})
    async with checkpointer(config, tmp_path) as chk:
        body = await chk.scrape()
        assert "checkpointer_flows" in body and "checkpointer_flow_started" in body, body

        idle = [await asyncio.open_connection("127.0.0.1", chk.metrics_port)
                for _ in range(MAX_CONNECTIONS + 5)]
        try:
            for reader, _writer in idle[MAX_CONNECTIONS:]:
                answer = await asyncio.wait_for(reader.read(), 30)
                assert answer.startswith(b"HTTP/1.1 503"), answer
            assert await chk.health() == SERVING
        finally:
            for _reader, writer in idle:
                writer.close()
        # The idle ones gone, a scrape is served again.
        async def scraped() -> bool:
            try:
                return "checkpointer_flows" in await chk.scrape()
            except (IndexError, ConnectionError):
                return False
        await wait_for(scraped, 30, "/metrics did not recover", interval=0.2)


# -- an address that cannot be bound -------------------------------------------------------------

SERVICES = ("replicator", "controller", "checkpointer", "heartbeat", "configsync")


@pytest.mark.parametrize("service", SERVICES)
async def test_an_address_that_cannot_be_bound_ends_with_one_line_and_status_2(
        service: str, primary: LocalBroker, backup: LocalBroker, unique: str,
        tmp_path: Path) -> None:
    """Before, each service ended with a traceback and exit status 1 (10.255.255.1 is not
    an address of this host; a port held by another listener is in use)."""
    config = mm2_config({f"a{unique}": primary, f"b{unique}": backup},
                        {f"a{unique}->b{unique}": {"topics": f"{unique}-none"}},
                        mirrorline_grpc_insecure="true", emit_heartbeats_enabled="false",
                        canary_enabled="false", audit_enabled="false")
    path = tmp_path / "bind.properties"
    path.write_text(config)
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for bind, grpc_port, metrics_port, address in (
                ("10.255.255.1", "0", "0", "10.255.255.1:"),
                ("127.0.0.1", str(port), str(free_port()), f"127.0.0.1:{port} (gRPC)"),
                ("127.0.0.1", str(free_port()), str(port), f"127.0.0.1:{port} (metrics)")):
            done = await asyncio.to_thread(
                mirrorline, service, "--config", str(path), "--bind", bind, "--grpc-port",
                grpc_port, "--metrics-port", metrics_port)
            assert done.returncode == 2, done.stderr
            assert "Traceback" not in done.stderr, done.stderr
            last = done.stderr.strip().splitlines()[-1]
            assert last.startswith("mirrorline: cannot listen on") and address in last, last
