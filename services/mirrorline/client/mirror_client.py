"""`MirrorClient`: MM2's replication view of one cluster, read from MM2's own topics.

Applications that fail over between clusters need two answers MM2 records but does not
serve: which clusters replicate into this one (and how far away they are), and where a
consumer group should resume on this cluster.  Java answers both with `MirrorClient`, which
reads only topic names and the checkpoints topic on the *local* cluster; doing the same
here makes this client work against clusters mirrored by Java MM2 as well as by Mirrorline,
with no Mirrorline service involved.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Final

from mirrorline.client.checkpoints import TranslatedOffsets, fold_checkpoints
from mirrorline.client.config import MirrorClientConfig
from mirrorline.core import topology
from mirrorline.core.bad_records import BadRecords
from mirrorline.core.policy import ReplicationPolicy
from mirrorline.kafka.admin import ClusterAdmin
from mirrorline.kafka.clients import admin_kwargs, consumer_kwargs
from mirrorline.kafka.heartbeats import newest_heartbeats
from mirrorline.kafka.reader import TopicReader

__all__ = ["DEFAULT_TIMEOUT", "MirrorClient"]

log = logging.getLogger(__name__)

#: Seconds `remote_consumer_offsets` reads before returning what it has (Java has no
#: default; one minute covers a large checkpoints topic on a slow link).
DEFAULT_TIMEOUT: Final = 60.0
_POLL_MS: Final = 200


class MirrorClient:
    """Replication topology and translated group offsets as seen from one cluster.

    Properties use Java client names, exactly as MM2's `MirrorClientConfig` takes them;
    they are validated here, so a bad value fails before anything connects.  Use as
    ``async with MirrorClient(props) as client: ...`` or call `start()` / `close()`.
    Every topology method asks the broker for the current topic list, so a long-lived
    client sees topics created after it started (as Java's does).
    """

    def __init__(self, properties: Mapping[str, str]) -> None:
        self._config = MirrorClientConfig.parse(properties)
        self._admin_kwargs = self._translate("admin", admin_kwargs(dict(self._config.admin)))
        self._consumer_kwargs = self._translate(
            "consumer", consumer_kwargs(dict(self._config.consumer)))
        self._admin: ClusterAdmin | None = None

    @staticmethod
    def _translate(role: str, translated: tuple[dict[str, Any], list[str]]) -> dict[str, Any]:
        kwargs, ignored = translated
        if ignored:
            # Only connection keys get this far, so an ignored one is a security setting the
            # operator expects to apply: say so rather than connect differently in silence.
            log.warning("MirrorClient %s config: %s not supported by the Python client, "
                        "ignored", role, ", ".join(ignored))
        return kwargs

    @property
    def policy(self) -> ReplicationPolicy:
        """The replication policy used to read topic names."""
        return self._config.policy

    async def start(self) -> None:
        """Connect to the cluster; a no-op when already started."""
        if self._admin is not None:
            return
        admin = ClusterAdmin("mirror-client", self._admin_kwargs)
        try:
            await admin.start()
        except BaseException:
            await admin.close()
            raise
        self._admin = admin

    async def close(self) -> None:
        """Disconnect; safe to call more than once (and before `start()`)."""
        admin, self._admin = self._admin, None
        if admin is not None:
            await admin.close()

    async def __aenter__(self) -> MirrorClient:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def _topics(self) -> set[str]:
        if self._admin is None:
            raise RuntimeError("MirrorClient is not started: call start() or use "
                               "'async with'")
        return set(await self._admin.topic_partitions())

    async def heartbeat_topics(self) -> set[str]:
        """Heartbeats topics on this cluster, the local ``heartbeats`` included."""
        return topology.heartbeat_topics(self.policy, await self._topics())

    async def checkpoint_topics(self) -> set[str]:
        """Checkpoints topics, one per upstream cluster that checkpoints into this one."""
        return topology.checkpoint_topics(self.policy, await self._topics())

    async def upstream_clusters(self) -> set[str]:
        """Aliases of every cluster replicating into this one, directly or transitively."""
        return topology.upstream_clusters(self.policy, await self._topics())

    async def replication_hops(self, alias: str) -> int:
        """Fewest hops from cluster `alias` to this one, or -1 if it does not reach it."""
        return topology.replication_hops(self.policy, await self._topics(), alias)

    async def heartbeat_paths(self, cluster: str = "",
                              stale_after_ms: int = 10_000) -> list[topology.HeartbeatPath]:
        """Every upstream path into this cluster with the age of its newest heartbeat.

        The same reading as `mirrorline admin topology`: route (origin first), hops, the
        newest heartbeat's timestamp and age, and whether the path is stale (no heartbeat
        within `stale_after_ms`). `cluster` names this cluster in the answer; cycles are
        left out only when it is given.
        """
        topics = topology.heartbeat_topics(self.policy, await self._topics())
        newest = await newest_heartbeats(cluster or "mirror-client", self._consumer_kwargs,
                                         topics)
        return topology.heartbeat_paths(self.policy, cluster, newest,
                                        now_ms=int(time.time() * 1000),
                                        stale_after_ms=stale_after_ms)

    async def remote_topics(self, source: str | None = None) -> set[str]:
        """Replicated (non-internal) topics on this cluster; only from `source` if given."""
        return topology.remote_topics(self.policy, await self._topics(), source)

    async def remote_consumer_offsets(self, group: str, remote_cluster_alias: str,
                                      timeout: float = DEFAULT_TIMEOUT) -> TranslatedOffsets:
        """Where `group` should resume on this cluster, from `remote_cluster_alias`'s checkpoints.

        Reads partition 0 of the checkpoints topic (MM2 creates it with one partition) from
        the beginning to its end and keeps the last checkpoint per downstream partition.
        Keys are downstream names: the result can be committed here as is.  When `timeout`
        seconds pass first, what was read so far is returned, as MM2 does.  Unlike MM2, a
        missing checkpoints topic answers ``{}`` at once instead of polling until the
        deadline (and, on brokers that auto-create topics, creating it).
        """
        topic = self.policy.checkpoints_topic(remote_cluster_alias)
        if topic not in await self._topics():
            log.info("no checkpoints topic %r on this cluster: nothing to translate for "
                     "group %r", topic, group)
            return {}
        offsets: TranslatedOffsets = {}
        deadline = time.monotonic() + timeout
        reader = TopicReader(self._consumer_kwargs, topic)
        bad = BadRecords(f"checkpoint reader (group {group!r})")
        try:
            await reader.start(partitions=1)
            while not await reader.caught_up():
                remaining_ms = int((deadline - time.monotonic()) * 1000)
                if remaining_ms <= 0:
                    log.warning("reading %r timed out after %gs; returning the %d offsets of "
                                "group %r read so far", topic, timeout, len(offsets), group)
                    break
                fold_checkpoints(await reader.poll(min(_POLL_MS, remaining_ms)), group,
                                 offsets, bad)
        finally:
            await reader.stop()
        log.info("consumed %d checkpoints for group %r from %r", len(offsets), group, topic)
        return offsets
