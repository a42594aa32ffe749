"""Consumer-group offsets on one cluster: list, describe, read, write, delete.

Offsets are read with OffsetFetch naming the partitions (the checkpointer always knows
which partitions it cares about) and written with an OffsetCommit outside any group
generation, exactly as Kafka's admin `alterConsumerGroupOffsets` does; the broker refuses
that for a group with active members, and callers check membership first anyway so
they never touch a group in use.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    GroupCoordinatorNotAvailableError,
    GroupLoadInProgressError,
    NotCoordinatorForGroupError,
    for_code,
)
from aiokafka.protocol.admin import DeleteGroupsRequest
from aiokafka.protocol.commit import OffsetCommitRequest
from aiokafka.structs import TopicPartition

from mirrorline.kafka.admin import ClusterAdmin, error_text

log = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
#: Answers a group coordinator gives while it is not ready yet: a cluster no group has used
#: creates its offsets topic on the first FindCoordinator, a new coordinator loads it.
COORDINATOR_NOT_READY = (GroupCoordinatorNotAvailableError, GroupLoadInProgressError,
                         NotCoordinatorForGroupError)
#: How long a group operation waits for its coordinator (Kafka's admin client retries
#: until its default.api.timeout.ms, 60 s; a failover should not wait that long).
COORDINATOR_WAIT_S = 20.0
_T = TypeVar("_T")

#: Group states in which nobody consumes (Kafka's names).
INACTIVE = frozenset({"Empty", "Dead"})


@dataclass(frozen=True)
class GroupState:
    group: str
    state: str           # "Stable", "Empty", "Dead", "PreparingRebalance", ...
    members: int

    @property
    def active(self) -> bool:
        return self.members > 0 or self.state not in INACTIVE


class GroupInUse(RuntimeError):
    """The group has active members; its offsets must not be written from outside."""


class GroupOffsets:
    def __init__(self, admin: ClusterAdmin) -> None:
        self.alias = admin.alias
        self._client: AIOKafkaAdminClient = admin.client

    async def list_groups(self) -> list[str]:
        found = await self._client.list_consumer_groups()
        return sorted({g[0] for g in found})

    async def describe(self, groups: Iterable[str]) -> dict[str, GroupState]:
        """State of each group; a group the broker does not know is "Dead".

        One request per group: an answer about one group can then never be mistaken for
        another's (a failed group comes back without its name), and one broker error does
        not hide every other group. Some Kafka-compatible brokers also garble responses
        that describe several groups at once.
        """
        names = sorted(set(groups))
        answers = await asyncio.gather(
            *(_when_coordinator_ready(g, functools.partial(self._describe_one, g))
              for g in names))
        return dict(zip(names, answers, strict=True))

    async def _describe_one(self, group: str) -> GroupState:
        for response in await self._client.describe_consumer_groups([group]):
            for g in response.groups:
                code, state, members = g[0], g[2], g[5]
                if code in (0, 69):  # 69: GROUP_ID_NOT_FOUND
                    return GroupState(group, state or "Dead", len(members))
                not_ready = for_code(code)
                if issubclass(not_ready, COORDINATOR_NOT_READY):  # asked again
                    raise not_ready(f"describing group {group!r}")
                # Unknown counts as active: nothing is written to a group we cannot see.
                log.warning("describing group %r on %r failed: %s", group, self.alias,
                            error_text(code))
                return GroupState(group, f"unknown ({error_text(code)})", 0)
        return GroupState(group, "Dead", 0)

    async def committed(self, group: str, partitions: Iterable[TopicPartitionKey]
                        ) -> dict[TopicPartitionKey, tuple[int, str]]:
        """The group's committed offsets for these partitions (absent: none committed)."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        found = await _when_coordinator_ready(group, functools.partial(
            self._client.list_consumer_group_offsets, group, partitions=tps))
        return {(tp.topic, tp.partition): (om.offset, om.metadata or "")
                for tp, om in found.items() if om.offset >= 0}

    async def commit(self, group: str, offsets: Mapping[TopicPartitionKey, tuple[int, str]]
                     ) -> None:
        """Write offsets for an inactive group (raises GroupInUse if it is not)."""
        if not offsets:
            return
        topics: dict[str, list[tuple[int, int, str]]] = {}
        for (topic, partition), (offset, metadata) in sorted(offsets.items()):
            topics.setdefault(topic, []).append((partition, offset, metadata))
        coordinator = await _when_coordinator_ready(
            group, functools.partial(self._client.find_coordinator, group))
        response: Any = await self._client._send_request_to_node(
            coordinator, OffsetCommitRequest(group, -1, "", -1, list(topics.items())))
        problems = []
        for topic, partitions in response.topics:
            for partition, code in partitions:
                if code in (22, 25, 27):  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCING
                    raise GroupInUse(f"group {group!r} on cluster {self.alias!r} has active "
                                     "members; its offsets were not changed")
                if code:
                    problems.append(f"{topic}-{partition}: {error_text(code)}")
        if problems:
            raise RuntimeError(f"committing offsets for group {group!r} on {self.alias!r} "
                               f"failed: {'; '.join(problems)}")

    async def delete_groups(self, groups: Iterable[str]) -> dict[str, str | None]:
        """Delete groups (and all their offsets); group -> error text or None."""
        groups = list(groups)
        out: dict[str, str | None] = {}
        for group in groups:
            coordinator = await _when_coordinator_ready(
                group, functools.partial(self._client.find_coordinator, group))
            response: Any = await self._client._send_request_to_node(
                coordinator, DeleteGroupsRequest([group]))
            for name, code in response.results:
                out[name] = None if code in (0, 69) else error_text(code)  # 69: no such group
        return out


async def _when_coordinator_ready(group: str, call: Callable[[], Awaitable[_T]]) -> _T:
    """`call()`, again while the group's coordinator says it is not ready yet (for at most
    COORDINATOR_WAIT_S; then its error is raised)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COORDINATOR_WAIT_S
    delay = 0.1
    while True:
        try:
            return await call()
        except COORDINATOR_NOT_READY as exc:
            if loop.time() + delay > deadline:
                raise
            log.debug("the coordinator of group %r is not ready (%s); retrying", group,
                      type(exc).__name__)
            await asyncio.sleep(delay)
            delay = min(2 * delay, 1.0)
