"""The pure parts behind the dashboards: the controller's state counts (every state from
0, so a panel reads 0 rather than no data), the audit's verdict counter from 0, and the
Prometheus install's unpacking of a Debian package without dpkg."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otlp_receiver import OtlpReceiver

from mirrorline.controller.status import state_counts
from mirrorline.core.record_audit import Verdict
from mirrorline.dev import prometheus
from mirrorline.heartbeat.metrics import register_metrics
from mirrorline.telemetry import setup_telemetry
from mirrorline.v1 import admin_pb2, flows_pb2


def test_state_counts_give_every_state_of_every_flow_from_zero() -> None:
    report = admin_pb2.StatusReport(
        flows=[admin_pb2.FlowSummary(flow="a->b", state=flows_pb2.FLOW_STATE_ERROR),
               admin_pb2.FlowSummary(flow="b->a", state=flows_pb2.FLOW_STATE_PAUSED)],
        partitions=[flows_pb2.PartitionStatus(flow="a->b", partition=0,
                                              state=flows_pb2.PARTITION_STATE_RUNNING),
                    flows_pb2.PartitionStatus(flow="a->b", partition=1,
                                              state=flows_pb2.PARTITION_STATE_ERROR),
                    flows_pb2.PartitionStatus(flow="a->b", partition=2,
                                              state=flows_pb2.PARTITION_STATE_ERROR)])
    flows, partitions = state_counts(report)
    assert flows == {"starting": 0, "running": 0, "paused": 1, "error": 1}
    assert partitions[("a->b", "error")] == 2 and partitions[("a->b", "running")] == 1
    assert partitions[("a->b", "unassigned")] == 0
    assert {s for f, s in partitions if f == "b->a"} == {
        "starting", "running", "paused", "error", "unassigned"}
    assert sum(n for (f, _), n in partitions.items() if f == "b->a") == 0


def test_audit_verdicts_are_counted_from_zero() -> None:
    """A MISSING series that appears only once it is 1 has no increase to show."""
    reader = InMemoryMetricReader()
    flow = SimpleNamespace(source="a", target="b", name="a->b")
    verdicts = SimpleNamespace(totals=lambda name: ({"OK": 3}, 0, 0))
    service: Any = SimpleNamespace(flows={"a->b": flow}, canaries={}, audited=["a->b"],
                                   verdicts=verdicts, audit_readers=[], watchers={})
    register_metrics(service, MeterProvider(metric_readers=[reader]).get_meter("t"))
    data = reader.get_metrics_data()
    assert data is not None
    [windows] = [m for rm in data.resource_metrics for sm in rm.scope_metrics
                 for m in sm.metrics if m.name == "audit-windows"]
    counts = {p.attributes["verdict"]: p.value for p in windows.data.data_points}
    assert counts == {**{v.value: 0 for v in Verdict}, "OK": 3}
    assert {"MISSING", "DUPLICATED", "CORRUPTED"} <= set(counts)


def _ar_member(name: str, body: bytes) -> bytes:
    header = (f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}".encode()
              + b"`\n")
    return header + body + (b"\n" if len(body) % 2 else b"")


def test_a_debian_package_is_unpacked_without_dpkg(tmp_path: Path) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:xz") as tar:
        script = b"#!/bin/sh\necho prometheus\n"
        info = tarfile.TarInfo("./usr/bin/prometheus")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    deb = tmp_path / "prometheus_2.42.0+ds-5+deb12u1_amd64.deb"
    deb.write_bytes(b"!<arch>\n" + _ar_member("debian-binary", b"2.0\n")
                    + _ar_member("control.tar.xz", b"x")
                    + _ar_member("data.tar.xz", data.getvalue()))
    prometheus.unpack_deb(deb, tmp_path / "root")
    binary = tmp_path / "root" / "usr" / "bin" / "prometheus"
    assert binary.read_bytes().startswith(b"#!/bin/sh") and binary.stat().st_mode & 0o100
    assert prometheus.upstream_version("2.42.0+ds-5+deb12u1") == "2.42.0"
    assert prometheus._deb_version("prometheus_2.42.0%2bds-5%2bdeb12u1_amd64.deb") == \
        "2.42.0+ds-5+deb12u1"


def test_the_newest_complete_install_in_the_cache_is_the_one_run(tmp_path: Path,
                                                                  monkeypatch: Any) -> None:
    monkeypatch.delenv(prometheus.PROMETHEUS_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert prometheus.binary(tmp_path) is None
    for version, complete in (("2.9.0", True), ("2.42.0", True), ("2.50.0", False)):
        root = tmp_path / f"prometheus-{version}"
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "bin" / "prometheus").write_text("")
        if complete:  # 2.50.0 is a half-finished install: never used
            (root / ".complete").write_text(version)
    assert prometheus.binary(tmp_path) == tmp_path / "prometheus-2.42.0/usr/bin/prometheus"

    def no_fetch(work: Path) -> tuple[Path, str]:
        raise AssertionError("installed already: nothing is fetched")
    monkeypatch.setattr(prometheus, "_fetch", no_fetch)
    assert prometheus.install(tmp_path) == prometheus.binary(tmp_path)


@pytest.mark.parametrize("exporter", ["otlp", "none"])
async def test_otel_metrics_exporter_none_keeps_metrics_off_otlp(
        exporter: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compose's Prometheus scrapes every service: with the metrics also pushed to the
    collector, which re-exposes them, each series was there twice. `none` pushes none
    (traces still go); the default pushes them. The collector is a real OTLP listener."""
    receiver = OtlpReceiver()
    await receiver.start()
    try:
        for key, value in receiver.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("OTEL_METRICS_EXPORTER", exporter)  # OTel's own name
        telemetry = setup_telemetry("replicator", instance="t1", metrics_port=None)
        await telemetry.start()
        telemetry.meter.create_counter("record-count").add(1, {"topic": "t"})
        await telemetry.stop(flush_timeout=10)  # the final flush pushes what there is
    finally:
        await receiver.stop()
    assert ("record-count" in receiver.metric_names) is (exporter == "otlp")
