"""Python counterpart of MM2's `MirrorClient` / `RemoteClusterUtils`.

For applications and failover scripts: ask one cluster which clusters replicate into it,
how many hops away they are, which topics are replicas, and where a consumer group should
resume after failing over.  Everything is read from MM2's own topics on that one cluster
(topic names, ``<alias>.checkpoints.internal``), so it works for Java MM2 deployments as well
as Mirrorline, and needs no Mirrorline service.

    async with MirrorClient({"bootstrap.servers": "backup:9092"}) as client:
        offsets = await client.remote_consumer_offsets("orders-app", "primary")

    # in a script without an event loop:
    offsets = translate_offsets_sync({"bootstrap.servers": "backup:9092"}, "primary",
                                     "orders-app")
"""

from __future__ import annotations

from mirrorline.client.checkpoints import TranslatedOffsets
from mirrorline.client.mirror_client import DEFAULT_TIMEOUT, MirrorClient
from mirrorline.client.utils import (
    checkpoint_topics,
    checkpoint_topics_sync,
    heartbeat_paths,
    heartbeat_paths_sync,
    heartbeat_topics,
    heartbeat_topics_sync,
    replication_hops,
    replication_hops_sync,
    translate_offsets,
    translate_offsets_sync,
    upstream_clusters,
    upstream_clusters_sync,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "MirrorClient",
    "TranslatedOffsets",
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
