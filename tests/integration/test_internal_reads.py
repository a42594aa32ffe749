"""Reading an internal topic "to its end" while it is being written.

Every owner reads the progress topic when it takes partitions over, while the partitions
it keeps go on copying and so go on writing progress; the checkpointer reads the offset
syncs of flows that keep producing them. A read that waited for a fetch bringing nothing
new chased that moving end: a worker given a dead worker's partitions sat in it, copying
none of them, until the read timed out (the reassignment test then saw partitions
unowned for 15-30 s).
"""

from __future__ import annotations

import pytest
from helpers import Record, create_topic, produce, steady, wait_for

from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.reader import read_topic

pytestmark = pytest.mark.integration


async def test_a_topic_written_all_the_time_is_read_to_its_end_without_chasing_it(
        primary: LocalBroker, unique: str) -> None:
    topic = f"{unique}-busy"
    await create_topic(primary.bootstrap, topic, 6)
    before = [Record(f"before-{i}".encode(), partition=i % 6) for i in range(300)]
    await produce(primary.bootstrap, topic, before)
    async with steady(primary.bootstrap, topic, 6, burst=1, pause_s=0) as sent:
        async def written() -> bool:
            return sent[0] > 0
        await wait_for(written, 10, "the writer wrote nothing", interval=0.05)
        # Far longer than reading a few thousand records takes, far shorter than a
        # writer that never stops would keep a chasing reader busy.
        records = await read_topic({"bootstrap_servers": primary.bootstrap}, topic,
                                   timeout=20)
        still_writing = sent[0]
    values = [r.value for r in records]
    assert {r.value for r in before} <= set(values)
    # Nothing read twice, and the writer really was writing throughout.
    assert len(values) == len(set(values))
    assert still_writing > 0
