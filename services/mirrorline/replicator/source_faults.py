"""What a flow does when the source no longer has what it was about to copy.

Records removed by retention (or DeleteRecords) before they were copied are reported with
their count and offsets -- in the log, the partition's status and the `record-lost-count`
metric -- and copying continues at the log start. A source whose log end fell below the
next offset to copy was truncated or recreated: the partition stops loudly, because
continuing would silently skip whatever is written there next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition

from mirrorline.kafka.progress import ProgressStore
from mirrorline.replicator.pump import PartitionPump, PumpState


async def out_of_range(consumer: AIOKafkaConsumer, pumps: Mapping[TopicPartition, PartitionPump],
                       offsets: Mapping[TopicPartition, int],
                       progress: ProgressStore | None) -> dict[TopicPartition, int]:
    """Settle an OFFSET_OUT_OF_RANGE fetch answer for the partitions in `offsets`; returns
    how many source records each partition lost (removed before they were copied)."""
    tps = [tp for tp in offsets if tp in pumps]
    lost_by: dict[TopicPartition, int] = {}
    if not tps:
        return lost_by
    begin = await consumer.beginning_offsets(tps)
    end = await consumer.end_offsets(tps)
    for tp in tps:
        pump, fetch_offset = pumps[tp], offsets[tp]
        if fetch_offset < begin[tp]:
            lost = begin[tp] - fetch_offset
            pump.skip_to(begin[tp], f"{lost} records (offsets {fetch_offset}.."
                                    f"{begin[tp] - 1}) were removed from the source by "
                                    "retention or DeleteRecords before they could be "
                                    "copied", lost)
            lost_by[tp] = lost
            if tp in consumer.assignment():  # the batch path fetches from the pump's position
                consumer.seek(tp, begin[tp])
            if progress is not None:
                progress.save(tp.topic, tp.partition, begin[tp])
        else:
            truncated(consumer, tp, pump, end[tp])
    return lost_by


def truncated(consumer: AIOKafkaConsumer | None, tp: TopicPartition, pump: PartitionPump,
              end: int) -> None:
    pump.fail(f"source log end offset {end} is below the next offset to copy "
              f"{pump.fetch_position}: the source partition was truncated or recreated; "
              "records beyond its end would be skipped silently")
    if consumer is not None and tp in consumer.assignment():
        consumer.pause(tp)


async def check_truncation(consumer: AIOKafkaConsumer,
                           pumps: Mapping[TopicPartition, PartitionPump],
                           highwater: Callable[[TopicPartition], int | None]) -> None:
    """Stop every running partition whose source log end fell below its fetch position.

    A consumer only notices that when it fetches at an offset past the end, which may
    never happen while the producer is quiet: so the flow calls this every second. The
    high watermark the consumer keeps is only that of its last fetch answer, which can
    be older than the position (a 30-minute soak saw end 1639 against position 1640 on
    a partition nobody truncated): a suspect is confirmed with the leader's own log end
    (ListOffsets) before it is stopped, and left running when the leader cannot answer.
    """
    suspects = [tp for tp, pump in pumps.items() if _behind(highwater(tp), pump)]
    if not suspects:
        return
    try:
        ends = await consumer.end_offsets(suspects)
    except Exception:  # unreachable now: the next round asks again
        return
    for tp in suspects:
        pump = pumps.get(tp)
        if pump is not None and _behind(ends.get(tp), pump):
            truncated(consumer, tp, pump, ends[tp])


def _behind(end: int | None, pump: PartitionPump) -> bool:
    return pump.state is PumpState.RUNNING and end is not None and end < pump.fetch_position
