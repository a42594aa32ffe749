"""How a record that stops its partition is named, on every copying path.

The replicator and the Spark executor both stop a partition at a record the target
refuses; an operator must find that record with any Kafka tool, whichever path met it,
so both say it in the same words: flow, source topic, partition, offset and remote topic.
"""

from __future__ import annotations


def rejected_record(what: str, flow: str, topic: str, partition: int, offset: int,
                    remote_topic: str) -> str:
    """`what` (the refusal), then where: `(flow F, topic 'T', partition P, offset O -> 'R')`."""
    return (f"{what} (flow {flow}, topic {topic!r}, partition {partition}, offset {offset} "
            f"-> {remote_topic!r})")
