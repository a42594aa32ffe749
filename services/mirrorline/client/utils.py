"""One-call helpers mirroring MM2's `RemoteClusterUtils`, async and synchronous.

Failover code usually needs one answer once ("where does my group resume on the backup?"),
so each helper opens a `MirrorClient`, asks one question and closes it -- the connection
never outlives the call.  The `*_sync` variants are for plain scripts and tools that have no
event loop; they run their own loop with `asyncio.run` and therefore **must not be called
from a running event loop** (they raise RuntimeError there -- await the async helper
instead, or push the call into a worker thread with `asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, TypeVar

from mirrorline.client.checkpoints import TranslatedOffsets
from mirrorline.client.mirror_client import DEFAULT_TIMEOUT, MirrorClient
from mirrorline.core.topology import HeartbeatPath

__all__ = [
    "checkpoint_topics",
    "checkpoint_topics_sync",
    "heartbeat_paths",
    "heartbeat_paths_sync",
    "heartbeat_topics",
    "heartbeat_topics_sync",
    "replication_hops",
    "replication_hops_sync",
    "translate_offsets",
    "translate_offsets_sync",
    "upstream_clusters",
    "upstream_clusters_sync",
]

_T = TypeVar("_T")


async def _once(properties: Mapping[str, str],
                ask: Callable[[MirrorClient], Awaitable[_T]]) -> _T:
    async with MirrorClient(properties) as client:
        return await ask(client)


def _run(make: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    """Run a coroutine on a fresh loop; refuse (before creating it) inside a running loop.

    Taking a factory means no coroutine object exists when we refuse, so there is no
    "coroutine was never awaited" warning on top of the error.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    raise RuntimeError("the *_sync helpers of mirrorline.client cannot run inside an event "
                       "loop; await the async helper instead (or use asyncio.to_thread)")


async def translate_offsets(properties: Mapping[str, str], remote_cluster_alias: str,
                            group: str, timeout: float = DEFAULT_TIMEOUT) -> TranslatedOffsets:
    """`group`'s offsets on the cluster in `properties`, translated from `remote_cluster_alias`.

    Same as `MirrorClient.remote_consumer_offsets`; the argument order follows Java's
    ``RemoteClusterUtils.translateOffsets(properties, remoteClusterAlias, group, timeout)``.
    """
    return await _once(properties, lambda c: c.remote_consumer_offsets(
        group, remote_cluster_alias, timeout))


async def upstream_clusters(properties: Mapping[str, str]) -> set[str]:
    """Aliases of every cluster replicating into the cluster in `properties`."""
    return await _once(properties, MirrorClient.upstream_clusters)


async def heartbeat_paths(properties: Mapping[str, str], cluster: str = "",
                          stale_after_ms: int = 10_000) -> list[HeartbeatPath]:
    """Upstream paths of the cluster in `properties` with their heartbeat ages."""
    return await _once(properties, lambda c: c.heartbeat_paths(cluster, stale_after_ms))


def heartbeat_paths_sync(properties: Mapping[str, str], cluster: str = "",
                         stale_after_ms: int = 10_000) -> list[HeartbeatPath]:
    """Blocking `heartbeat_paths`; never call it from a running event loop."""
    return _run(lambda: heartbeat_paths(properties, cluster, stale_after_ms))


async def replication_hops(properties: Mapping[str, str], alias: str) -> int:
    """Fewest hops from `alias` to the cluster in `properties`, or -1."""
    return await _once(properties, lambda c: c.replication_hops(alias))


async def heartbeat_topics(properties: Mapping[str, str]) -> set[str]:
    """Heartbeats topics on the cluster in `properties`."""
    return await _once(properties, MirrorClient.heartbeat_topics)


async def checkpoint_topics(properties: Mapping[str, str]) -> set[str]:
    """Checkpoints topics on the cluster in `properties`."""
    return await _once(properties, MirrorClient.checkpoint_topics)


def translate_offsets_sync(properties: Mapping[str, str], remote_cluster_alias: str,
                           group: str, timeout: float = DEFAULT_TIMEOUT) -> TranslatedOffsets:
    """Blocking `translate_offsets`; never call it from a running event loop."""
    return _run(lambda: translate_offsets(properties, remote_cluster_alias, group, timeout))


def upstream_clusters_sync(properties: Mapping[str, str]) -> set[str]:
    """Blocking `upstream_clusters`; never call it from a running event loop."""
    return _run(lambda: upstream_clusters(properties))


def replication_hops_sync(properties: Mapping[str, str], alias: str) -> int:
    """Blocking `replication_hops`; never call it from a running event loop."""
    return _run(lambda: replication_hops(properties, alias))


def heartbeat_topics_sync(properties: Mapping[str, str]) -> set[str]:
    """Blocking `heartbeat_topics`; never call it from a running event loop."""
    return _run(lambda: heartbeat_topics(properties))


def checkpoint_topics_sync(properties: Mapping[str, str]) -> set[str]:
    """Blocking `checkpoint_topics`; never call it from a running event loop."""
    return _run(lambda: checkpoint_topics(properties))
