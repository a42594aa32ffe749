"""Replication topology read from topic names alone -- the pure half of MM2's MirrorClient.

MM2 needs no registry of who replicates to whom: heartbeats are renamed at every hop
(``b.a.heartbeats`` on cluster c means a -> b -> c), so a cluster's topic list already encodes
its upstream graph.  These functions take that list (from a metadata request made elsewhere)
and answer the MirrorClient questions.  Results are sets because the answers are
unordered in MM2 too.

Walks stop at an alias already seen: identity-style policies map a name to itself, and a
walk relying on the name to shrink would never end.  Unlike Java we never report the empty
alias -- ``.heartbeats`` parses (with Java split semantics) as coming from ``""``, which is
no cluster anyone can address.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirrorline.core.policy import ReplicationPolicy

__all__ = [
    "HeartbeatPath",
    "checkpoint_topics",
    "count_hops",
    "heartbeat_paths",
    "heartbeat_topics",
    "remote_topics",
    "replication_hops",
    "upstream_clusters",
]


def heartbeat_topics(policy: ReplicationPolicy, topics: Iterable[str]) -> set[str]:
    """Heartbeats topics on the cluster, the local ``heartbeats`` included."""
    return {t for t in topics if policy.is_heartbeats_topic(t)}


def checkpoint_topics(policy: ReplicationPolicy, topics: Iterable[str]) -> set[str]:
    """Checkpoints topics, one per upstream cluster that checkpoints into this one."""
    return {t for t in topics if policy.is_checkpoints_topic(t)}


def _sources(policy: ReplicationPolicy, topic: str) -> set[str]:
    """Every alias on the chain of hops that led to `topic`."""
    seen: set[str] = set()
    current: str | None = topic
    while current is not None:
        source = policy.topic_source(current)
        if source is None or source in seen:
            break
        seen.add(source)
        current = policy.upstream_topic(current)
    return seen


def upstream_clusters(policy: ReplicationPolicy, topics: Iterable[str]) -> set[str]:
    """Aliases of all clusters that (directly or transitively) replicate into this one."""
    clusters: set[str] = set()
    for topic in heartbeat_topics(policy, topics):
        clusters |= _sources(policy, topic)
    clusters.discard("")
    return clusters


def count_hops(policy: ReplicationPolicy, topic: str, alias: str) -> int:
    """Hops from cluster `alias` to this cluster along `topic`'s name, or -1 if not on it."""
    hops = 0
    visited: set[str] = set()
    current: str | None = topic
    while current is not None:
        hops += 1
        source = policy.topic_source(current)
        if source is None:
            return -1
        if source == alias:
            return hops
        if source in visited:
            return -1  # an identity-style loop: the alias will never appear
        visited.add(source)
        current = policy.upstream_topic(current)
    return -1


def replication_hops(policy: ReplicationPolicy, topics: Iterable[str], alias: str) -> int:
    """Fewest hops from cluster `alias` over all heartbeats topics, or -1 if unreachable."""
    hops = [count_hops(policy, t, alias) for t in heartbeat_topics(policy, topics)]
    reachable = [h for h in hops if h != -1]
    return min(reachable, default=-1)


def remote_topics(policy: ReplicationPolicy, topics: Iterable[str],
                  source: str | None = None) -> set[str]:
    """Non-internal topics copied from another cluster; only from `source` when given."""
    result: set[str] = set()
    for topic in topics:
        if policy.is_internal_topic(topic):
            continue
        topic_source = policy.topic_source(topic)
        if topic_source is None or (source is not None and topic_source != source):
            continue
        result.add(topic)
    return result


@dataclass(frozen=True)
class HeartbeatPath:
    """One replication path into `cluster`, proven by heartbeats arriving on `topic`."""

    cluster: str
    topic: str
    #: The clusters the heartbeats passed, origin first; `cluster` follows the last one.
    route: tuple[str, ...]
    #: Timestamp of the newest heartbeat on the topic (None: none read).
    newest_ms: int | None
    age_ms: int | None
    stale: bool
    reason: str

    @property
    def origin(self) -> str:
        return self.route[0]

    @property
    def hops(self) -> int:
        return len(self.route)


def _route(policy: ReplicationPolicy, topic: str) -> tuple[str, ...] | None:
    """Aliases along `topic`'s name, nearest first; None for a name that loops."""
    chain: list[str] = []
    current: str | None = topic
    while current is not None:
        source = policy.topic_source(current)
        if source is None:
            break
        if source in chain:
            return None
        chain.append(source)
        current = policy.upstream_topic(current)
    return tuple(chain)


def heartbeat_paths(policy: ReplicationPolicy, cluster: str,
                    newest: Mapping[str, int | None], *, now_ms: int,
                    stale_after_ms: int) -> list[HeartbeatPath]:
    """Every upstream path of `cluster` from its heartbeat topics and the timestamp of the
    newest record on each (`newest`: topic -> ms, None when the topic is empty).

    A path whose name passes through `cluster` itself or through one alias twice is a
    cycle and is left out, as is the local ``heartbeats`` topic (no hop at all). A path
    whose newest heartbeat is older than `stale_after_ms` -- or that has none -- is stale.
    """
    out: list[HeartbeatPath] = []
    for topic in sorted(heartbeat_topics(policy, newest)):
        chain = _route(policy, topic)
        if not chain or cluster in chain or "" in chain:
            continue
        stamp = newest[topic]
        age = None if stamp is None else max(0, now_ms - stamp)
        if age is None:
            stale, reason = True, "no heartbeat on the topic yet"
        elif age > stale_after_ms:
            stale, reason = True, f"newest heartbeat is {age} ms old (stale after " \
                                  f"{stale_after_ms} ms)"
        else:
            stale, reason = False, ""
        out.append(HeartbeatPath(cluster, topic, tuple(reversed(chain)), stamp, age, stale,
                                 reason))
    return out
