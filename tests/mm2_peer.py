"""Apache Kafka's MirrorMaker 2 as a peer in tests: its file, its process, what it wrote.

Import as `from mm2_peer import ...` (tests/ is on sys.path through conftest.py). The
process itself is `mirrorline.dev.mm2`; this adds what the interchange tests share: one
properties file both MM2 and Mirrorline start from, topics whose partitions have leaders
before anything is produced, and readers of the internal topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import struct
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from helpers import Record, consume_all, create_topic, wait_for
from procs import QUIET_SHARED_CLUSTERS

from mirrorline.dev import mm2

# MM2's record layouts, decoded here without Mirrorline's codecs, so a codec that drifted
# from MM2's format cannot read its own mistakes back as right.


@dataclass(frozen=True)
class Checkpoint:
    """A record of `<source>.checkpoints.internal`: key (group, topic, partition), value
    version int16, upstream int64, downstream int64, metadata."""

    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int


@dataclass(frozen=True)
class OffsetSync:
    """A record of `mm2-offset-syncs.*.internal`: key (topic, partition), value upstream
    int64, downstream int64."""

    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int


def _string(raw: bytes, at: int) -> tuple[str, int]:
    (size,) = struct.unpack_from(">h", raw, at)
    return raw[at + 2:at + 2 + size].decode(), at + 2 + size


def decode_checkpoint(key: bytes, value: bytes) -> Checkpoint:
    group, at = _string(key, 0)
    topic, at = _string(key, at)
    (partition,) = struct.unpack_from(">i", key, at)
    _version, upstream, downstream = struct.unpack_from(">hqq", value, 0)
    return Checkpoint(group, topic, partition, upstream, downstream)


def decode_offset_sync(key: bytes, value: bytes) -> OffsetSync:
    topic, at = _string(key, 0)
    (partition,) = struct.unpack_from(">i", key, at)
    upstream, downstream = struct.unpack_from(">qq", value, 0)
    return OffsetSync(topic, partition, upstream, downstream)


def numbered(topic: str, per_partition: int, start: int, partitions: int = 2
             ) -> list[Record]:
    """Records `topic:P:I` for I in [start, start + per_partition) on each partition P."""
    return [Record(f"{topic}:{p}:{i}".encode(), partition=p)
            for p in range(partitions) for i in range(start, start + per_partition)]


def aliases() -> tuple[str, str]:
    """Fresh cluster aliases: the internal topics named after them are this test's own."""
    tag = secrets.token_hex(3)
    return f"m{tag}", f"n{tag}"


def shared_config(a: str, primary: Any, b: str, backup: Any, flow: Mapping[str, str],
                  **top: str) -> str:
    """One file for both MM2 and Mirrorline: flow a->b only, MM2's internal topics with
    one replica, quick refreshes, no heartbeats or canaries on the shared clusters, and a
    Mirrorline deployment (control topics) of its own."""
    settings = {**mm2.SINGLE_NODE_SETTINGS, **mm2.QUICK_SETTINGS,
                **{k.replace("_", "."): v for k, v in QUIET_SHARED_CLUSTERS.items()},
                "mirrorline.deployment": f"d{secrets.token_hex(4)}",
                **{k.replace("_", "."): v for k, v in top.items()}}
    lines = [f"clusters = {a}, {b}",
             f"{a}.bootstrap.servers = {primary.bootstrap}",
             f"{b}.bootstrap.servers = {backup.bootstrap}",
             *(f"{k} = {v}" for k, v in settings.items()),
             f"{a}->{b}.enabled = true",
             *(f"{a}->{b}.{k} = {v}" for k, v in flow.items()),
             f"{b}->{a}.enabled = false"]
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def running_mm2(config: str, tmp: Path, target: str, *, name: str = "mm2"
                      ) -> AsyncIterator[mm2.MirrorMaker2]:
    """MM2 for the flows into `target`, from `config`; killed at exit if still running."""
    path = tmp / f"{name}.properties"
    path.write_text(config)
    process = await mm2.start_mm2(path, directory=tmp, clusters=[target], name=name)
    try:
        yield process
    finally:
        if process.running:
            await mm2.stop_mm2(process, kill=True)


async def create_ready(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` and wait until every partition has a leader (a produce right after
    creation can otherwise meet NotLeaderForPartition on Kafka)."""
    await create_topic(bootstrap, topic, partitions)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        async def led() -> bool:
            (described,) = await admin.describe_topics([topic])
            found = described.get("partitions") or []
            return described.get("error_code") == 0 and len(found) == partitions and all(
                p.get("leader", -1) >= 0 and p.get("error_code") == 0 for p in found)
        await wait_for(led, 30, f"{topic} has no leader for every partition", interval=0.2)
    finally:
        await admin.close()


async def trim(bootstrap: str, topic: str, partitions: int, before: int) -> None:
    """Delete the records below `before` in every partition (as retention would), so that
    a mirror's target offsets differ from the source's and a swapped or misread offset
    shows."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, p): RecordsToDelete(before)
                                    for p in range(partitions)})
    finally:
        await admin.close()


async def checkpoints(backup: Any, source: str) -> list[Checkpoint]:
    """Every record of `<source>.checkpoints.internal`, in order per partition."""
    records = await consume_all(backup.bootstrap, f"{source}.checkpoints.internal")
    return [decode_checkpoint(r.key, r.value) for rs in records.values() for r in rs]


def latest(found: list[Checkpoint], group: str) -> dict[tuple[str, int], Checkpoint]:
    out: dict[tuple[str, int], Checkpoint] = {}
    for c in found:
        if c.group == group:
            out[(c.topic, c.partition)] = c
    return out



async def wait_checkpoints(backup: Any, source: str, group: str,
                           want: Mapping[tuple[str, int], int], timeout: float = 90, *,
                           downstream: Mapping[tuple[str, int], int] | None = None
                           ) -> dict[tuple[str, int], Checkpoint]:
    """Wait until the newest checkpoint of each remote partition records `want` (upstream
    offsets) and, if given, `downstream`; returns the newest checkpoints of `group`."""
    found: dict[tuple[str, int], Checkpoint] = {}

    async def there() -> bool:
        nonlocal found
        found = latest(await checkpoints(backup, source), group)
        return all(k in found and found[k].upstream_offset == u for k, u in want.items()) \
            and all(found[k].downstream_offset == o for k, o in (downstream or {}).items())
    await wait_for(there, timeout, f"checkpoints of {group} never reached {dict(want)} "
                   f"(downstream {dict(downstream or {})})", interval=0.5)
    return found


async def offset_syncs(primary: Any, target: str) -> list[OffsetSync]:
    """Every offset sync of `mm2-offset-syncs.<target>.internal` (on the source), in order."""
    records = await consume_all(primary.bootstrap, f"mm2-offset-syncs.{target}.internal")
    return [decode_offset_sync(r.key, r.value) for rs in records.values() for r in rs]


def sync_rule(syncs: list[OffsetSync], topic: str, partition: int, upstream: int) -> int:
    """MM2's translation of `upstream` from the newest sync at or below it (one past the
    synced record unless the offset is the synced record itself)."""
    below = [s for s in syncs if s.topic == topic and s.partition == partition
             and s.upstream_offset <= upstream]
    assert below, f"no offset sync of {topic}-{partition} at or below {upstream}"
    newest = max(below, key=lambda s: s.upstream_offset)
    return newest.downstream_offset + (0 if newest.upstream_offset == upstream else 1)


async def progress(backup: Any, source: str, topic: str | None = None
                   ) -> dict[tuple[str, int], int]:
    """Next offset to copy per source partition, from `mm2-offsets.<source>.internal`
    (of `topic` only, when given: MM2 and Mirrorline also copy a shared source's
    `heartbeats` topic)."""
    records = await consume_all(backup.bootstrap, f"mm2-offsets.{source}.internal")
    found: dict[tuple[str, int], int] = {}
    for rs in records.values():
        for r in rs:
            connector, where = json.loads(r.key)
            if connector == "MirrorSourceConnector" and where["cluster"] == source:
                # The key as Connect's JSON converter writes it (Connect finds progress by
                # its exact bytes): anything else is not progress MM2 can see.
                if r.key != json.dumps([connector, {"cluster": where["cluster"],
                                        "partition": where["partition"],
                                        "topic": where["topic"]}],
                                       separators=(",", ":")).encode():
                    continue
                offset = json.loads(r.value)["offset"] if r.value else None
                if offset is None:
                    found.pop((where["topic"], where["partition"]), None)
                else:
                    found[(where["topic"], where["partition"])] = offset + 1
    return {k: v for k, v in found.items() if topic is None or k[0] == topic}


async def values_by_partition(bootstrap: str, topic: str, expected: int
                              ) -> dict[int, list[bytes | None]]:
    got = await consume_all(bootstrap, topic, expected=expected, timeout=120)
    return {p: [r.value for r in rs] for p, rs in got.items()}


async def settle(seconds: float) -> None:
    """Let a process run on (a quiet period in which nothing should change)."""
    await asyncio.sleep(seconds)
