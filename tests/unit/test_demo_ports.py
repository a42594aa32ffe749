"""`make demo` with a port taken: free ports are chosen, or the error names the holder."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from mirrorline.dev import demo
from mirrorline.dev.portcheck import holder, is_free
from mirrorline.ports import GRPC_PORTS, METRICS_PORTS, run_ports


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_held_port_is_not_free_and_its_holder_is_named(listener: int) -> None:
    assert not is_free(listener)
    assert holder(listener).startswith(f"pid {os.getpid()} ")


def test_run_ports_lists_every_listener_of_mirrorline_run() -> None:
    ports = run_ports(2, 1000)
    assert ports["controller gRPC"] == GRPC_PORTS["controller"] + 1000
    assert ports["replicator-1 metrics"] == METRICS_PORTS["replicator"] + 1001
    assert ports["configsync gRPC"] == GRPC_PORTS["configsync"] + 1000
    assert ports["heartbeat metrics"] == METRICS_PORTS["heartbeat"] + 1000
    assert len(ports) == 12 and len(set(ports.values())) == 12
    with_spark = run_ports(2, 1000, spark=True)
    assert with_spark["spark-executor gRPC"] == GRPC_PORTS["spark-executor"] + 1000
    assert len(with_spark) == 14 and len(set(with_spark.values())) == 14


def test_the_demo_moves_past_a_taken_port(listener: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's services get the first offset whose ports are all free."""
    monkeypatch.setattr(demo, "run_ports",
                        lambda workers, offset=0: {"controller gRPC": listener + offset})
    step = next(k for k in range(1, 200) if is_free(listener + k))
    monkeypatch.setattr(demo, "_OFFSETS", (0, step))
    assert demo.pick_port_offset() == step


def test_no_free_offset_fails_at_once_naming_port_and_holder(
        listener: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "run_ports", lambda workers, offset=0: {"controller gRPC": listener})
    with pytest.raises(demo.PortsTaken) as info:
        demo.pick_port_offset()
    assert f"port {listener} (controller gRPC) is in use by pid {os.getpid()}" in str(info.value)
