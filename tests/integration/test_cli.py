"""The `mirrorline` command as an operator meets it: bad input, warnings, `run`."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import QUIET_SHARED_CLUSTERS, free_port, mm2_config

from mirrorline.dev.brokers import LocalBroker, is_alive
from mirrorline.dev.portcheck import is_free
from mirrorline.ports import METRICS_PORTS, run_ports

pytestmark = pytest.mark.integration


async def mirrorline(*args: str, timeout: float = 30) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


@pytest.mark.parametrize("command", ["replicator", "checkpointer", "configsync", "run"])
@pytest.mark.parametrize(("text", "named"), [
    ("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
     "a->c.enabled = true\n", ["a->c.enabled", "mm2.properties:4:", "c"]),
    ("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
     "a->b.enabled = true\nrefresh.topics.interval.seconds = soon\n",
     ["refresh.topics.interval.seconds", "mm2.properties:5:", "soon"]),
    ("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
     "a->b.enabled = true\na->b.topics = orders, (unclosed\n", ["a->b.topics", "(unclosed"]),
])
async def test_bad_configuration_exits_2_naming_the_key_and_starts_nothing(
        command: str, text: str, named: list[str], tmp_path: Path) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text(text)
    extra = ["--port-offset", "1"] if command == "run" else ["--metrics-port", "-1"]
    code, out = await mirrorline(command, "--config", str(config), *extra)
    assert code == 2, out
    assert "configuration error" in out
    for fragment in named:
        assert fragment in out, f"{fragment!r} missing from: {out}"
    assert "started (pid" not in out


async def test_a_checkpointer_with_no_flow_to_checkpoint_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n")
    code, out = await mirrorline("checkpointer", "--config", str(config), "--metrics-port", "-1",
                                 "--grpc-port", "0")
    assert code == 2 and "no enabled replication flow to checkpoint" in out


async def test_run_with_a_port_taken_says_which_and_by_what_and_starts_nothing(
        tmp_path: Path) -> None:
    config = tmp_path / "mm2.properties"
    config.write_text("clusters = a, b\na.bootstrap.servers = x:1\nb.bootstrap.servers = y:1\n"
                      "a->b.enabled = true\n")
    with socket.socket() as held:
        # The heartbeat service's metrics port lands on the one held, and every other
        # port of `run` at that offset is free (else the message names another one).
        for _ in range(50):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            offset = port - METRICS_PORTS["heartbeat"]
            others = [p for p in run_ports(1, offset).values() if p != port]
            if all(0 < p < 65536 and is_free(p) for p in others):
                break
        held.bind(("127.0.0.1", port))
        held.listen()
        code, out = await mirrorline("run", "--config", str(config),
                                     "--port-offset", str(offset))
    assert code == 2, out
    assert f"port {port} (heartbeat metrics) on 127.0.0.1 is in use by pid {os.getpid()}" \
        in out
    assert "started (pid" not in out and "Traceback" not in out


async def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    code, out = await mirrorline("run", "--config", str(tmp_path / "nope.properties"))
    assert code == 2
    assert "nope.properties" in out


async def test_run_restarts_a_crashed_service_and_stops_everything_on_sigterm(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    topic = f"{unique}-run"
    await create_topic(primary.bootstrap, topic, 2)
    config = tmp_path / "mm2.properties"
    config.write_text(mm2_config({"primary": primary, "backup": backup},
                                 {"primary->backup": {"topics": topic}}, nonsense_key="1",
                                 mirrorline_deployment=unique, **QUIET_SHARED_CLUSTERS))
    log = (tmp_path / "run.log").open("wb")
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "run", "--config", str(config), "--workers", "2",
        "--port-offset", "23000", "--lease-ms", "2000", stdout=log, stderr=log)
    try:
        await produce(primary.bootstrap, topic, [Record(b"a", partition=i % 2) for i in range(10)])
        await consume_all(backup.bootstrap, f"primary.{topic}", expected=10, timeout=60)

        first = children(run.pid)
        assert sorted(first.values()) == ["checkpointer-0", "configsync-0", "controller-0",
                                          "heartbeat-0", "replicator-0", "replicator-1"]
        victim = next(pid for pid, role in first.items() if role == "replicator-0")
        os.kill(victim, signal.SIGKILL)

        async def restarted() -> bool:
            now = children(run.pid)
            return sorted(now.values()) == sorted(first.values()) and victim not in now
        await wait_for(restarted, 30, "the crashed worker was not restarted")
        await produce(primary.bootstrap, topic, [Record(b"b", partition=i % 2) for i in range(10)])
        mirrored = await consume_all(backup.bootstrap, f"primary.{topic}", expected=20,
                                     timeout=60)
        assert sorted(r.value for rs in mirrored.values() for r in rs).count(b"b") == 10

        running = children(run.pid)
        run.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(run.wait(), 60) == 0
        assert not any(is_alive(pid) for pid in running)
    finally:
        if run.returncode is None:
            run.kill()
            await run.wait()
        log.close()
    text = (tmp_path / "run.log").read_text()
    # Unknown keys are named -- once, by run: neither its services nor their restarts
    # repeat the file's warnings.
    assert text.count("nonsense.key") == 1 and "warning" in text
    assert "restarting in" in text


def children(pid: int) -> dict[int, str]:
    """Child pid -> the service it runs (its --worker-id / --controller-id / --instance-id)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    found: dict[int, str] = {}
    for child in (path.read_text().split() if path.exists() else []):
        args = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        for flag in (b"--worker-id", b"--controller-id", b"--instance-id"):
            if flag in args:
                found[int(child)] = args[args.index(flag) + 1].decode()
    return found


async def test_two_runs_started_together_on_the_same_ports_one_exits_2_at_once(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """Both pass a check that only looks at the ports; only one may start services. The
    other exits 2 naming a port and the run holding it, and no service of it ever starts
    (none crashes on `address already in use`, none is restarted)."""
    config = tmp_path / "mm2.properties"
    config.write_text(mm2_config({"primary": primary, "backup": backup},
                                 {"primary->backup": {"topics": f"{unique}-none"}},
                                 mirrorline_deployment=unique, **QUIET_SHARED_CLUSTERS))
    offset = next(o for o in range(24000, 30000, 100)
                  if all(is_free(p) for p in run_ports(1, o).values()))
    logs = [tmp_path / "run-a.log", tmp_path / "run-b.log"]
    files = [path.open("wb") for path in logs]
    runs = list(await asyncio.gather(*(asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "run", "--config", str(config), "--workers", "1",
        "--port-offset", str(offset), stdout=f, stderr=f) for f in files)))
    try:
        done, _ = await asyncio.wait([asyncio.ensure_future(r.wait()) for r in runs],
                                     timeout=60, return_when=asyncio.FIRST_COMPLETED)
        assert done, "neither run exited"
        [loser] = [r for r in runs if r.returncode is not None]
        winner = runs[1 - runs.index(loser)]
        text = logs[runs.index(loser)].read_text()
        assert loser.returncode == 2, text
        assert f"is in use by pid {winner.pid} " in text, text
        assert "started (pid" not in text and "Traceback" not in text, text
        assert winner.returncode is None
        winner.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(winner.wait(), 60) == 0
    finally:
        for run in runs:
            if run.returncode is None:
                run.kill()
                await run.wait()
        for f in files:
            f.close()
    assert "Traceback" not in logs[runs.index(winner)].read_text()


@pytest.mark.parametrize("command", [["produce", "t", "--count", "1"],
                                     ["consume", "t", "--group", "g"]], ids=lambda c: c[0])
async def test_dev_records_against_an_unreachable_cluster_say_so_in_one_line(
        command: list[str]) -> None:
    port = free_port()
    code, out = await mirrorline("dev", command[0], f"127.0.0.1:{port}", *command[1:])
    assert code == 1, out
    assert out.strip() == (f"mirrorline: cluster at 127.0.0.1:{port} unreachable: connection "
                           f"refused: Unable connect to 127.0.0.1:{port}: [Errno 111] Connect "
                           f"call failed ('127.0.0.1', {port})"), out
