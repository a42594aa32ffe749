"""The control plane secured: TLS, identities, roles, fencing and bounded requests, as real
processes on real brokers.

One deployment (controller, worker, checkpointer) runs with mutual TLS required and a
tokens file; its certificates and tokens are made in the test by `deploy/make-certs.sh`
(openssl), exactly as `make certs` makes them. The tests then act as the people and the
attackers of the issue: the CLI over mTLS, callers without valid credentials, a viewer
and an operator overstepping, a rogue worker and a rogue checkpointer, scrapes outside the
flow, a catastrophic pattern, and a huge import.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import Deployment, deployment_config, free_port

from mirrorline import grpcsecure
from mirrorline.dev.brokers import LocalBroker
from mirrorline.grpcsecure import ClientCredentials
from mirrorline.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    audit_pb2,
    coordinator_pb2,
    coordinator_pb2_grpc,
    failover_pb2,
    flows_pb2,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Secured:
    d: Deployment
    certs: Path
    server: str
    flow: str
    topic: str
    source: str
    target: str

    def creds(self, who: str | None = None, *, token: str | None = None) -> ClientCredentials:
        ca = (self.certs / "ca.pem").read_bytes()
        if who is None:
            return ClientCredentials(ca=ca, token=token)
        return ClientCredentials(ca=ca, certificate=(self.certs / f"{who}.pem").read_bytes(),
                                 key=(self.certs / f"{who}.key").read_bytes(), token=token)

    def admin(self, who: str | None = None, *, token: str | None = None
              ) -> tuple[grpc.aio.Channel, admin_pb2_grpc.AdminStub]:
        channel = grpcsecure.channel(self.server, self.creds(who, token=token))
        return channel, admin_pb2_grpc.AdminStub(channel)

    def token(self, who: str) -> str:
        return (self.certs / f"{who}.token").read_text().strip()


def make_certs(directory: Path) -> None:
    subprocess.run(["sh", str(ROOT / "deploy" / "make-certs.sh"), str(directory)], check=True,
                   capture_output=True)
    # A certificate the CA signed for someone the tokens file does not list.
    subprocess.run(
        "openssl req -newkey rsa:2048 -nodes -keyout stranger.key -out stranger.csr "
        "-subj /CN=stranger && openssl x509 -req -in stranger.csr -CA ca.pem -CAkey ca.key "
        "-CAcreateserial -out stranger.pem -days 2", shell=True, check=True, cwd=directory,
        capture_output=True)


@pytest.fixture(scope="module")
async def secured(primary: LocalBroker, backup: LocalBroker,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Secured]:
    tmp = tmp_path_factory.mktemp("secured")
    certs = tmp / "certs"
    make_certs(certs)
    tag = os.urandom(3).hex()
    source, target = f"s{tag}", f"d{tag}"
    topic = f"sec{tag}"
    await create_topic(primary.bootstrap, topic, 2)
    await create_topic(primary.bootstrap, f"victim{tag}", 1)
    # A name on which a backtracking engine would spend hours with (a+)+$.
    await create_topic(primary.bootstrap, "a" * 60 + f"-x{tag}", 1)
    config = deployment_config(
        {source: primary, target: backup},
        {f"{source}->{target}": {"topics": topic, "refresh.topics.interval.seconds": "1",
                                 "groups": f"g{tag}.*"}},
        mirrorline_grpc_tls_certificate=str(certs / "service.pem"),
        mirrorline_grpc_tls_key=str(certs / "service.key"),
        mirrorline_grpc_tls_ca=str(certs / "ca.pem"),
        mirrorline_grpc_tls_client_auth_required="true",
        mirrorline_admin_tokens_file=str(certs / "tokens.txt"))
    d = Deployment(config, tmp, lease_ms=3000, credentials=ClientCredentials(
        ca=(certs / "ca.pem").read_bytes(), certificate=(certs / "service.pem").read_bytes(),
        key=(certs / "service.key").read_bytes()))
    try:
        controller = await d.controller("c1")
        await d.worker("w1")
        await d.checkpointer("k1")
        s = Secured(d, certs, f"127.0.0.1:{controller.grpc_port}", f"{source}->{target}",
                    topic, source, target)
        await produce(primary.bootstrap, topic, [Record(f"r{i}".encode(), partition=i % 2)
                                                 for i in range(20)])
        await consume_all(backup.bootstrap, f"{source}.{topic}", expected=20, timeout=60)
        yield s
    finally:
        await d.close()


async def _cli(s: Secured, *args: str, env: dict[str, str] | None = None
               ) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "admin", "--server", s.server, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _code(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]
    except grpc.aio.AioRpcError as exc:
        return exc.code()
    return grpc.StatusCode.OK


async def test_the_cli_works_over_mtls_and_the_audit_trail_names_who_changed_what(
        secured: Secured) -> None:
    s = secured
    certs = s.certs
    mtls = ["--ca", str(certs / "ca.pem"), "--cert", str(certs / "operator.pem"),
            "--key", str(certs / "operator.key")]
    code, out, err = await _cli(s, *mtls, "--output", "json", "flows", "list")
    assert code == 0, err
    assert [f["name"] for f in json.loads(out)["flows"]] == [s.flow]

    code, _, err = await _cli(s, *mtls, "flows", "update", s.flow, "--set",
                              "offset.lag.max=50")
    assert code == 0, err
    # The token wins over the certificate: the same change, now as the admin token.
    code, _, err = await _cli(s, *mtls, "flows", "update", s.flow, "--set",
                              "offset.lag.max=60", env={"MIRRORLINE_TOKEN": s.token("admin")})
    assert code == 0, err

    code, out, err = await _cli(s, *mtls, "--output", "json", "history", "--flow", s.flow)
    assert code == 0, err
    entries = json.loads(out)["entries"]
    updates = [(e["identity"], e["role"], e["outcome"]) for e in entries
               if e["rpc"] == "UpdateFlow"]
    assert updates[-2:] == [("operator", "operator", "OK"), ("admin-token", "admin", "OK")]
    assert json.loads(entries[-1]["arguments"]["set"]) == {"offset.lag.max": "60"}

    # Plaintext, or TLS without a client certificate, never reaches the API.
    code, _, err = await _cli(s, "flows", "list")
    assert code == 1 and "cannot reach the controller" in err
    code, _, err = await _cli(s, "--ca", str(certs / "ca.pem"), "flows", "list")
    assert code == 1


async def test_probes_check_health_with_the_deployments_tls(secured: Secured) -> None:
    port = secured.d.controllers["c1"].grpc_port
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "health", "--config", str(secured.d.path),
        "--port", str(port), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "SERVING"


async def test_unknown_or_wrong_credentials_are_refused(secured: Secured) -> None:
    s = secured
    channel, stub = s.admin("stranger")  # CA-signed, but not in the tokens file
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListFlows(admin_pb2.ListFlowsRequest(), timeout=10)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close()
    channel, stub = s.admin("stranger")
    try:  # streams are checked like every other call
        stream = stub.WatchStatus(admin_pb2.WatchStatusRequest(interval_ms=500), timeout=10)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stream.read()
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close()
    channel, stub = s.admin("viewer")
    try:
        stream = stub.WatchStatus(admin_pb2.WatchStatusRequest(interval_ms=500), timeout=10)
        report = await stream.read()
        assert isinstance(report, admin_pb2.StatusReport) and report.flows
        stream.cancel()
    finally:
        await channel.close()
    channel, stub = s.admin("viewer", token="not-a-token-of-this-deployment")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.ListFlows(admin_pb2.ListFlowsRequest(), timeout=10)
        assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close()
    log = s.d.controllers["c1"].log_path.read_text()
    assert "refused /mirrorline.v1.Admin/ListFlows from an unauthenticated caller" in log
    assert "not-a-token-of-this-deployment" not in log


async def test_a_viewer_cannot_pause_and_an_operator_cannot_scrape(secured: Secured) -> None:
    s = secured
    channel, viewer = s.admin("viewer")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await viewer.PauseFlow(admin_pb2.FlowRequest(name=s.flow), timeout=10)
        assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "needs role operator" in (info.value.details() or "")
        flows = await viewer.ListFlows(admin_pb2.ListFlowsRequest(), timeout=10)
        assert not flows.flows[0].paused
    finally:
        await channel.close()
    channel, operator = s.admin("operator")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await operator.ExecuteFailback(failover_pb2.ExecuteFailbackRequest(
                flow=s.flow, scrape=True, confirm=f"scrape {s.source}",
                topics=[s.topic]), timeout=10)
        assert info.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert "needs role admin" in (info.value.details() or "")
    finally:
        await channel.close()


async def test_no_rogue_process_registers_as_a_worker_or_answers_as_the_checkpointer(
        secured: Secured) -> None:
    s = secured
    for who in ("admin", "stranger"):
        channel = grpcsecure.channel(s.server, s.creds(who))
        try:
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            beat = await _code(stub.Heartbeat(coordinator_pb2.WorkerHeartbeat(
                worker_id="evil-worker", address="127.0.0.1:1"), timeout=10))
            announce = await _code(stub.Announce(coordinator_pb2.ServiceAnnouncement(
                service="checkpointer", instance_id="evil", address="127.0.0.1:1"),
                timeout=10))
            assert {beat, announce} <= {grpc.StatusCode.PERMISSION_DENIED,
                                        grpc.StatusCode.UNAUTHENTICATED}, (who, beat, announce)
        finally:
            await channel.close()
    channel, admin = s.admin("admin")
    try:
        workers = await admin.ListWorkers(admin_pb2.ListWorkersRequest(), timeout=10)
        assert [w.worker_id for w in workers.workers] == ["w1"]
        # Offset calls still reach the real checkpointer (it announced with its service
        # certificate), not the rogue address.
        request = failover_pb2.TranslateOffsetsRequest(flow=s.flow, group=f"g{s.flow[1:7]}-x")
        codes: list[grpc.StatusCode] = []

        async def answered() -> bool:
            codes.append(await _code(admin.TranslateOffsets(request, timeout=20)))
            return codes[-1] is not grpc.StatusCode.UNAVAILABLE
        await wait_for(answered, 30, "the checkpointer never answered", interval=0.5)
        assert codes[-1] in (grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND,
                             grpc.StatusCode.FAILED_PRECONDITION), codes
    finally:
        await channel.close()


async def test_a_scrape_outside_the_flow_or_of_an_internal_topic_is_refused(
        secured: Secured, primary: LocalBroker) -> None:
    s = secured
    tag = s.topic.removeprefix("sec")
    channel, admin = s.admin("admin")
    try:
        await admin.PauseFlow(admin_pb2.FlowRequest(name=s.flow), timeout=10)
        try:
            for victim in (f"victim{tag}", "mirrorline.control.internal", "__consumer_offsets",
                           f"mm2-offset-syncs.{s.target}.internal", "heartbeats"):
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await admin.ExecuteFailback(failover_pb2.ExecuteFailbackRequest(
                        flow=s.flow, scrape=True, confirm=f"scrape {s.source}",
                        topics=[victim]), timeout=30)
                assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT, victim
                assert victim in (info.value.details() or "")
        finally:
            await admin.ResumeFlow(admin_pb2.FlowRequest(name=s.flow), timeout=10)
        # Refused attempts are in the audit trail too, with their outcome.
        history = await admin.History(audit_pb2.HistoryRequest(flow=s.flow), timeout=10)
        scrapes = [(e.identity, e.outcome) for e in history.entries
                   if e.rpc == "ExecuteFailback"]
        assert scrapes[-5:] == [("admin", "INVALID_ARGUMENT")] * 5
        assert [e.rpc for e in history.entries][-1] == "ResumeFlow"
    finally:
        await channel.close()
    from aiokafka.admin import AIOKafkaAdminClient
    client = AIOKafkaAdminClient(bootstrap_servers=primary.bootstrap)
    await client.start()
    try:
        assert f"victim{tag}" in await client.list_topics()
    finally:
        await client.close()


async def test_a_catastrophic_pattern_leaves_every_service_healthy_and_replicating(
        secured: Secured, primary: LocalBroker, backup: LocalBroker) -> None:
    s = secured
    channel, admin = s.admin("operator")
    try:
        await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(
            name=s.flow, set={"topics": f"{s.topic}, (a+)+$, (.+)+@"}), timeout=10)
        services = (*s.d.controllers.values(), *s.d.workers.values(),
                    *s.d.checkpointers.values())

        async def all_serving() -> bool:
            # A worker restarts the changed flow, briefly NOT_SERVING; a service stuck in a
            # backtracking match would not answer at all (60 `a`: hours of matching).
            states = await asyncio.gather(*(p.health() for p in services))
            return all(state == health_pb2.HealthCheckResponse.SERVING for state in states)
        await wait_for(all_serving, 60, "a service is not SERVING with the pattern stored",
                       interval=0.5)
        await produce(primary.bootstrap, s.topic, [Record(f"late{i}".encode(), partition=i % 2)
                                                   for i in range(10)])
        await consume_all(backup.bootstrap, f"{s.source}.{s.topic}", expected=30, timeout=60)
        await wait_for(all_serving, 60, "a service stopped SERVING", interval=0.5)

        async def running() -> bool:
            report = await admin.GetStatus(admin_pb2.GetStatusRequest(flow=s.flow), timeout=5)
            return report.flows[0].state == flows_pb2.FLOW_STATE_RUNNING
        await wait_for(running, 30, "the flow did not stay running", interval=0.5)
        # A list over the bound is refused at once, naming the field.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(
                name=s.flow, set={"topics": "a" * 3_500_000}), timeout=30)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "set.topics" in (info.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await admin.UpdateFlow(admin_pb2.UpdateFlowRequest(
                name=s.flow, set={"replication.policy.separator": "-" * 300}), timeout=30)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "replication.policy.separator" in (info.value.details() or "")
    finally:
        await channel.close()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_3000_cluster_import_is_refused_without_growing_the_controller(
        secured: Secured) -> None:
    s = secured
    pid = s.d.controllers["c1"].proc.pid  # type: ignore[union-attr]
    before = _rss_kb(pid)
    clusters = [f"c{i}" for i in range(3000)]
    text = f"clusters = {', '.join(clusters)}\n" + "".join(
        f"c{i}.bootstrap.servers = 127.0.0.1:1\nc{i}->c{i + 1}.enabled = true\n"
        for i in range(2999))
    channel, admin = s.admin("operator")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await admin.ImportFlows(admin_pb2.ImportFlowsRequest(properties=text,
                                                                 source_name="huge"),
                                    timeout=20)
        assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "more than 256 flows" in (info.value.details() or "")
        flows = await admin.ListFlows(admin_pb2.ListFlowsRequest(), timeout=10)
        assert [f.name for f in flows.flows] == [s.flow]
    finally:
        await channel.close()
    assert _rss_kb(pid) < before + 50_000  # nothing like the gigabytes of a pair explosion


async def test_plaintext_on_a_public_address_refuses_to_start(tmp_path: Path,
                                                              primary: LocalBroker) -> None:
    path = tmp_path / "plain.properties"
    path.write_text(deployment_config({"x": primary, "y": primary}))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "controller", "--config", str(path), "--bind",
        "0.0.0.0", "--grpc-port", str(free_port()), "--metrics-port", "-1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert "without TLS" in err.decode() and "mirrorline.grpc.insecure" in err.decode()


async def test_without_client_certificates_services_use_the_service_token(
        primary: LocalBroker, backup: LocalBroker, tmp_path: Path) -> None:
    """TLS without client authentication: people and services identify by token only."""
    certs = tmp_path / "certs"
    make_certs(certs)
    tag = os.urandom(3).hex()
    config = deployment_config(
        {f"s{tag}": primary, f"d{tag}": backup}, {},
        mirrorline_grpc_tls_certificate=str(certs / "service.pem"),
        mirrorline_grpc_tls_key=str(certs / "service.key"),
        mirrorline_grpc_tls_ca=str(certs / "ca.pem"),
        mirrorline_admin_tokens_file=str(certs / "tokens.txt"),
        mirrorline_grpc_service_token_file=str(certs / "service.token"))
    ca = (certs / "ca.pem").read_bytes()
    d = Deployment(config, tmp_path, lease_ms=3000, credentials=ClientCredentials(ca=ca))
    try:
        controller = await d.controller("c1")
        await d.worker("w1")
        server = f"127.0.0.1:{controller.grpc_port}"
        anonymous = grpcsecure.channel(server, ClientCredentials(ca=ca))
        viewer = grpcsecure.channel(server, ClientCredentials(
            ca=ca, token=(certs / "viewer.token").read_text().strip()))
        try:
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await admin_pb2_grpc.AdminStub(anonymous).ListWorkers(
                    admin_pb2.ListWorkersRequest(), timeout=10)
            assert info.value.code() is grpc.StatusCode.UNAUTHENTICATED

            async def registered() -> bool:
                found = await admin_pb2_grpc.AdminStub(viewer).ListWorkers(
                    admin_pb2.ListWorkersRequest(), timeout=10)
                return [w.worker_id for w in found.workers if w.alive] == ["w1"]
            await wait_for(registered, 40, "the worker never registered with its token",
                           interval=0.5)
        finally:
            await anonymous.close()
            await viewer.close()
    finally:
        await d.close()
