"""Local Tansu brokers: `mirrorline dev brokers` end to end (its default, pip-only broker),
`start_broker`'s checks; the drill's produce/consume tools against the suite's clusters."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import PAST_MS, Record, consume_all, create_topic, dev_brokers, produce

from mirrorline.dev.brokers import (
    BrokerError,
    LocalBroker,
    free_port,
    is_alive,
    is_broker_process,
    load_state,
    probe,
    start_broker,
    stop_broker_async,
)

pytestmark = pytest.mark.integration



async def test_cli_up_status_down_round_trip(state_dir: Path) -> None:
    p1, p2 = free_port(), free_port()
    rc, out, err = await dev_brokers(state_dir, "up", f"east={p1}", f"west={p2}")
    assert rc == 0, err
    assert f"127.0.0.1:{p1}" in out and f"127.0.0.1:{p2}" in out
    recorded = load_state(state_dir)
    assert sorted(recorded) == ["east", "west"]
    assert {b.port for b in recorded.values()} == {p1, p2}
    for broker in recorded.values():
        assert is_alive(broker.pid)
        assert await asyncio.to_thread(Path(broker.log_path).is_file)
        assert await probe(broker.bootstrap) == broker.alias  # outlived the CLI process

    # Idempotent: a running alias is reported, not restarted.
    rc, out, err = await dev_brokers(state_dir, "up", "east", f"west={p2}")
    assert rc == 0, err
    assert out.count("already running") == 2
    assert load_state(state_dir) == recorded

    rc, out, err = await dev_brokers(state_dir, "status")
    assert rc == 0, err
    lines = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert lines["east"][1:] == ["tansu", f"127.0.0.1:{p1}", str(recorded["east"].pid), "yes",
                                 "yes"]
    assert lines["west"][4:] == ["yes", "yes"]

    rc, out, err = await dev_brokers(state_dir, "down", "west")
    assert rc == 0, err
    assert "stopped west" in out
    assert sorted(load_state(state_dir)) == ["east"]
    await _wait_dead(recorded["west"].pid)

    rc, out, err = await dev_brokers(state_dir, "down")
    assert rc == 0, err
    assert load_state(state_dir) == {}
    await _wait_dead(recorded["east"].pid)
    data = json.loads(await asyncio.to_thread((state_dir / "brokers.json").read_text))
    assert data["brokers"] == []

    rc, out, err = await dev_brokers(state_dir, "status")
    assert rc == 0 and "no brokers recorded" in out


async def test_cli_reports_a_dead_broker_and_unknown_alias(state_dir: Path) -> None:
    rc, _, err = await dev_brokers(state_dir, "up", f"solo={free_port()}")
    assert rc == 0, err
    solo = load_state(state_dir)["solo"]
    await stop_broker_async(solo.pid)  # dies behind the CLI's back
    await _wait_dead(solo.pid)

    rc, out, err = await dev_brokers(state_dir, "status")
    assert rc == 1
    assert "solo" in out and err.strip().endswith("not running or not answering: solo")
    assert len(err.strip().splitlines()) == 1

    rc, _, err = await dev_brokers(state_dir, "down", "nosuch")
    assert rc == 1 and "nosuch" in err


async def test_cli_rejects_a_busy_port(state_dir: Path, primary: LocalBroker) -> None:
    rc, _, err = await dev_brokers(state_dir, "up", f"other={primary.port}")
    assert rc == 1
    assert "already in use" in err and len(err.strip().splitlines()) == 1
    assert load_state(state_dir) == {}


async def test_start_broker_serves_records(primary: LocalBroker, unique: str) -> None:
    topic = f"{unique}-records"
    await create_topic(primary.bootstrap, topic, partitions=3)
    sent = [
        Record(b"v0", key=b"k0", headers=[("h", b"1"), ("h", b"2")], timestamp_ms=PAST_MS,
               partition=0),
        Record(None, key=b"tombstone", timestamp_ms=PAST_MS + 1, partition=2),
        Record(b"v2", partition=2),
    ]
    await produce(primary.bootstrap, topic, sent)

    got = await consume_all(primary.bootstrap, topic, expected=3)
    assert [len(got[p]) for p in (0, 1, 2)] == [1, 0, 2]
    assert Record.of(got[0][0]) == Record(
        b"v0", key=b"k0", headers=[("h", b"1"), ("h", b"2")], timestamp_ms=PAST_MS,
        partition=0,
    )
    tombstone, last = got[2]
    assert (tombstone.key, tombstone.value, tombstone.timestamp) == (
        b"tombstone", None, PAST_MS + 1)
    assert (last.key, last.value, last.offset) == (None, b"v2", 1)


async def test_recognises_its_own_broker_process(tmp_path: Path) -> None:
    """A Tansu broker of its own: the suite's clusters may be Apache Kafka."""
    broker = await start_broker("solo", log_dir=tmp_path)
    try:
        assert is_broker_process(broker.pid, "solo", broker.port)
        assert is_broker_process(broker.pid, "solo")
        assert not is_broker_process(broker.pid, "backup")
        assert not is_broker_process(broker.pid, "solo", broker.port + 1)
        assert not is_broker_process(os.getpid(), "solo")
    finally:
        await stop_broker_async(broker.pid)


async def test_start_broker_refuses_a_busy_port(primary: LocalBroker, tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match="already in use"):
        await start_broker("intruder", port=primary.port, log_dir=tmp_path)


async def test_start_broker_reports_a_broker_that_exits(tmp_path: Path) -> None:
    with pytest.raises(BrokerError, match=r"exited with status \d+ during start-up") as info:
        await start_broker("broken", storage="sqlite://nope.db", log_dir=tmp_path)
    assert "libsql" in str(info.value)  # the log tail says why


async def _wait_dead(pid: int, within: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while is_alive(pid):
        assert loop.time() < deadline, f"pid {pid} still alive"
        await asyncio.sleep(0.05)


async def _mirrorline(*args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_dev_produce_and_consume_report_what_a_group_read(
        primary: LocalBroker, unique: str) -> None:
    """The drill's tools: numbered records in; a group reads part, then the rest."""
    topic, group = f"{unique}-drill", f"{unique}-readers"
    code, out = await _mirrorline("dev", "produce", primary.bootstrap, topic, "--count", "90")
    assert (code, out.strip()) == (0, f"produced 90 records to {topic}")
    records = await consume_all(primary.bootstrap, topic, expected=90)
    assert len(records) == 3
    assert sorted(int(r.value.decode().rsplit("-", 1)[1]) for rs in records.values()
                  for r in rs) == list(range(90))
    code, out = await _mirrorline("dev", "consume", primary.bootstrap, topic, "--group", group,
                                  "--max", "40")
    assert code == 0 and out.startswith("read 40 records (40 distinct")
    code, out = await _mirrorline("dev", "consume", primary.bootstrap, topic, "--group", group)
    assert code == 0 and out.startswith("read 50 records (50 distinct"), out
