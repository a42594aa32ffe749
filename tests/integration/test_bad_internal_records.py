"""Bad records in every internal topic while mirroring goes on (issue: one bad offset-map
record froze translation forever; garbage elsewhere vanished without a word).

Each internal topic gets garbage bytes and a record that decodes but cannot be true. Every
reader must report each one once at WARNING with topic, partition and offset, skip it,
and carry on: records keep being mirrored and checkpoints keep being translated exactly.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from helpers import Record, commit_offsets, consume_all, create_topic, produce, wait_for
from procs import checkpointer, mm2_config, replicator

from mirrorline.core.progress import progress_topic, source_offset_key
from mirrorline.core.topics import offset_map_topic
from mirrorline.core.wire import Checkpoint, OffsetSync
from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1.offset_map_pb2 import OffsetMapRecord

pytestmark = pytest.mark.integration

FAST = {"emit.checkpoints.interval.seconds": "1", "refresh.groups.interval.seconds": "1"}
GARBAGE = b"\xff\x00 not a record \x00\xff"


def _impossible_map_record(topic: str) -> bytes:
    record = OffsetMapRecord(topic=topic, partition=0)
    record.runs.add(upstream_start=0, count=-3, downstream_start=0)
    return record.SerializeToString()


async def test_bad_records_in_every_internal_topic_are_reported_and_skipped(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    tag = secrets.token_hex(3)
    a, b = f"p{tag}", f"q{tag}"
    topic, group = f"{unique}-orders", f"{unique}-app"
    remote = f"{a}.{topic}"
    syncs, checkpoints = f"mm2-offset-syncs.{b}.internal", f"{a}.checkpoints.internal"
    progress, offset_map = progress_topic(a), offset_map_topic(a)
    await create_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, [Record(f"v{i}".encode()) for i in range(20)])
    # Read at start: progress (by the replicator), checkpoints (by the checkpointer).
    for bootstrap, name in ((backup.bootstrap, progress), (backup.bootstrap, checkpoints)):
        await create_topic(bootstrap, name, 1)
    await produce(backup.bootstrap, progress, [
        Record(GARBAGE, key=b"\x00junk"),
        Record(b'{"offset": "seven"}', key=source_offset_key(a, topic, 0)),
    ])
    await produce(backup.bootstrap, checkpoints, [
        Record(GARBAGE, key=b"junk"),
        Record(Checkpoint(group, remote, 0, -5, -5).encode_value(),
               key=Checkpoint(group, remote, 0, -5, -5).encode_key()),
    ])
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {"topics": topic, **FAST}})
    async with replicator(config, tmp_path) as rep, checkpointer(config, tmp_path) as chk:
        await consume_all(backup.bootstrap, remote, expected=20)
        # Followed while running: the offset syncs and the offset map.
        await produce(primary.bootstrap, syncs, [
            Record(GARBAGE, key=b"junk"),
            Record(OffsetSync(topic, 0, -1, -9).encode_value(),
                   key=OffsetSync(topic, 0, -1, -9).encode_key()),
        ])
        await produce(backup.bootstrap, offset_map, [Record(GARBAGE),
                                                     Record(_impossible_map_record(topic))])
        await produce(primary.bootstrap, topic, [Record(f"w{i}".encode()) for i in range(30)])
        mirrored = await consume_all(backup.bootstrap, remote, expected=50)
        assert [r.value for r in mirrored[0]] == (
            [f"v{i}".encode() for i in range(20)] + [f"w{i}".encode() for i in range(30)])

        # Translation goes on past the bad records: a commit at 50 is checkpointed at 50.
        await commit_offsets(primary.bootstrap, group, {(topic, 0): 50})

        async def translated() -> bool:
            found = [Checkpoint.decode(r.key, r.value)
                     for r in (await consume_all(backup.bootstrap, checkpoints))[0][2:]]
            return any(c.group == group and c.upstream_offset == 50
                       and c.downstream_offset == 50 for c in found)
        await wait_for(translated, 40, "no checkpoint past the bad records")

        def reported(log: str, name: str, offsets: tuple[int, ...]) -> bool:
            return all(log.count(f"skipped a bad record at {name}-0 offset {o}:") == 1
                       for o in offsets)

        async def all_reported() -> bool:
            rlog, clog = rep.log_tail(2000), chk.log_tail(2000)
            return (reported(rlog, progress, (0, 1)) and reported(clog, checkpoints, (0, 1))
                    and reported(clog, offset_map, ()) and clog.count(offset_map) >= 2
                    and reported(clog, syncs, ()) and clog.count(f"{syncs}-0 offset") >= 2)
        await wait_for(all_reported, 20, "bad records were not each reported once:\n"
                       + rep.log_tail(30) + "\n" + chk.log_tail(30))
        assert "Traceback" not in rep.log_tail(2000) + chk.log_tail(2000)
