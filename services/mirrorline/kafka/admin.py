"""Topic administration for one cluster, over aiokafka's admin client.

Thin on purpose: each method is one Kafka request (or a fixed pair) turned into plain
Python values, with the broker's error codes translated into messages an operator can
act on. Decisions (what to create, with which configs) live in the pure core.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from mirrorline.core.filters import ConfigEntry, ConfigSource

log = logging.getLogger(__name__)

TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
UNSUPPORTED_VERSION = 35
#: How long creating a topic waits for the cluster's metadata to show it (`wait_visible`).
CREATED_VISIBLE_S = 10.0


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    #: -1 asks for the cluster's default (resolved here; see `resolve_replication_factor`).
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


class UnsupportedByBroker(RuntimeError):
    """The broker does not implement a request Mirrorline needs (reported, never fatal)."""


def error_text(code: int, message: str | None = None) -> str:
    name = for_code(code).__name__
    return f"{name}: {message}" if message else name


class ClusterAdmin:
    """Admin operations against one cluster alias."""

    def __init__(self, alias: str, client_kwargs: Mapping[str, Any]) -> None:
        self.alias = alias
        self._client = AIOKafkaAdminClient(**client_kwargs)
        self._default_rf: int | None = None

    @property
    def client(self) -> AIOKafkaAdminClient:
        """The underlying aiokafka admin client (for adapters such as `kafka.groups`)."""
        return self._client

    @classmethod
    async def open(cls, alias: str, client_kwargs: Mapping[str, Any],
                   timeout: float | None = None) -> ClusterAdmin:
        """A started admin client. When starting fails or takes longer than `timeout`, the
        client is closed before the error is raised, so a caller retrying until the
        cluster answers leaves no connection behind."""
        admin = cls(alias, client_kwargs)
        try:
            await asyncio.wait_for(admin.start(), timeout)
        except BaseException:
            with contextlib.suppress(Exception):
                await admin.close()
            raise
        return admin

    async def start(self) -> None:
        await self._client.start()

    async def close(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> ClusterAdmin:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def describe_cluster(self) -> dict[str, Any]:
        result: dict[str, Any] = await self._client.describe_cluster()
        return result

    async def topic_partitions(self, names: Iterable[str] | None = None) -> dict[str, int]:
        """Partition count per topic (all topics when `names` is None); missing topics omitted."""
        wanted = None if names is None else set(names)
        if wanted is not None and not wanted:
            return {}
        # Always ask for every topic: a metadata request naming topics lets a broker with
        # auto.create.topics.enable create them on the spot, with its default partition
        # count -- exactly what must not happen to a remote topic we are about to create.
        topics = await self._client.describe_topics(None)
        return {
            t["topic"]: len(t["partitions"])
            for t in topics
            if t["error_code"] == 0 and t["partitions"]
            and (wanted is None or t["topic"] in wanted)
        }

    async def wait_visible(self, names: Iterable[str], timeout: float = CREATED_VISIBLE_S
                           ) -> dict[str, int]:
        """Wait until the cluster's metadata shows every topic of `names` with a leader for
        each partition, at most `timeout` seconds; the partition count of each it shows by
        then (as `topic_partitions` gives it).

        A CreateTopics answer means the controller created the topic, not that the broker
        answering the next Metadata request knows it yet: under KRaft each broker applies
        the new topic from the metadata log a moment later, longer when it is busy (many
        topics created at once). A topic just created may therefore be missing, or have no
        leader, in the next answer."""
        wanted = set(names)
        seen: dict[str, int] = {}
        if not wanted:
            return seen
        deadline = asyncio.get_running_loop().time() + timeout
        pause = 0.05
        while True:
            topics = await self._client.describe_topics(None)  # see topic_partitions
            seen = {t["topic"]: len(t["partitions"]) for t in topics
                    if t["topic"] in wanted and t["error_code"] == 0 and t["partitions"]
                    and all(p["error_code"] == 0 and p["leader"] >= 0
                            for p in t["partitions"])}
            left = deadline - asyncio.get_running_loop().time()
            if seen.keys() == wanted or left <= 0:
                return seen
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, 0.5)

    async def topic_configs(self, topics: Iterable[str]) -> dict[str, list[ConfigEntry]]:
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        if not resources:
            return {}
        responses = await self._client.describe_configs(resources)
        result: dict[str, list[ConfigEntry]] = {}
        for response in responses:
            for res in response.resources:
                code, _msg, _rtype, name, entries = res[0], res[1], res[2], res[3], res[4]
                if code != 0:
                    log.warning("%s: cannot describe configs of %s: %s", self.alias, name,
                                error_text(code, _msg))
                    continue
                result[name] = [_config_entry(e) for e in entries]
        return result

    async def resolve_replication_factor(self, requested: int) -> int:
        """Turn -1 into a concrete factor.

        Kafka only accepts -1 ("broker default") from CreateTopics v4 on, and the
        client library speaks v3; so ask the broker for `default.replication.factor`
        and fall back to min(3, live brokers) when it will not say.
        """
        if requested != -1:
            return requested
        if self._default_rf is None:
            self._default_rf = await self._broker_default_rf()
        return self._default_rf

    async def _broker_default_rf(self) -> int:
        cluster = await self.describe_cluster()
        brokers = cluster.get("brokers") or []
        node = cluster.get("controller_id")
        if node is None or node < 0:
            node = brokers[0]["node_id"] if brokers else None
        if node is not None:
            try:
                responses = await self._client.describe_configs(
                    [ConfigResource(ConfigResourceType.BROKER, str(node),
                                    configs=["default.replication.factor"])]
                )
                for response in responses:
                    for res in response.resources:
                        for entry in res[4]:
                            if entry[0] == "default.replication.factor" and entry[1]:
                                return max(1, int(entry[1]))
            except Exception as exc:
                log.debug("%s: broker default replication factor unknown: %r", self.alias, exc)
        return max(1, min(3, len(brokers)))

    async def create_topics(self, specs: Iterable[TopicSpec]) -> dict[str, str | None]:
        """Create topics; returns topic -> error text (None = created or already there)."""
        new: list[NewTopic] = []
        for spec in specs:
            rf = await self.resolve_replication_factor(spec.replication_factor)
            new.append(NewTopic(spec.name, spec.partitions, rf,
                                topic_configs=dict(spec.configs)))
        if not new:
            return {}
        response = await self._client.create_topics(new)
        result: dict[str, str | None] = {}
        for item in response.topic_errors:
            name, code = item[0], item[1]
            message = item[2] if len(item) > 2 else None
            result[name] = None if code in (0, TOPIC_ALREADY_EXISTS) else error_text(code, message)
        return result

    async def ensure_topic(self, spec: TopicSpec) -> None:
        """Create `spec` unless it exists; raise with the broker's reason otherwise."""
        existing = await self.topic_partitions([spec.name])
        if spec.name in existing:
            return
        errors = await self.create_topics([spec])
        error = errors.get(spec.name)
        if error:
            raise RuntimeError(f"cannot create topic {spec.name!r} on cluster "
                               f"{self.alias!r}: {error}")
        log.info("%s: created topic %s (%d partitions)", self.alias, spec.name, spec.partitions)
        await self.wait_visible([spec.name])  # so that its first reader finds it

    async def delete_topics(self, names: Iterable[str]) -> dict[str, str | None]:
        """Delete topics; topic -> error text (None = deleted or already gone)."""
        names = list(names)
        if not names:
            return {}
        response = await self._client.delete_topics(names)
        out: dict[str, str | None] = {}
        for item in response.topic_error_codes:
            name, code = item[0], item[1]
            out[name] = None if code in (0, 3) else error_text(code)  # 3: unknown topic
        return out

    async def recreate_topics(self, specs: Iterable[TopicSpec], timeout: float = 60.0) -> None:
        """Create topics that were just deleted: Kafka deletes in the background, so wait
        until the old ones are gone from the metadata first."""
        specs = list(specs)
        names = {s.name for s in specs}
        deadline = asyncio.get_running_loop().time() + timeout
        while names & set(await self.topic_partitions(names)):
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError(f"topics still being deleted after {timeout:.0f}s: "
                                   f"{', '.join(sorted(names))}")
            await asyncio.sleep(0.5)
        errors = await self.create_topics(specs)
        failed = {n: e for n, e in errors.items() if e}
        if failed:
            raise RuntimeError(f"cannot recreate topics on {self.alias!r}: {failed}")

    async def create_partitions(self, topic: str, total: int) -> None:
        """Grow `topic` to `total` partitions; UnsupportedByBroker when the broker cannot."""
        try:
            response = await self._client.create_partitions(
                {topic: NewPartitions(total_count=total)}
            )
        except Exception as exc:
            raise UnsupportedByBroker(
                f"cluster {self.alias!r} did not accept CreatePartitions for {topic!r}: {exc!r}"
            ) from exc
        for item in response.topic_errors:
            code = item[1]
            if code in (0, INVALID_PARTITIONS):
                continue
            if code == UNSUPPORTED_VERSION:
                raise UnsupportedByBroker(
                    f"cluster {self.alias!r} does not support CreatePartitions")
            message = item[2] if len(item) > 2 else None
            raise RuntimeError(f"cannot grow {topic!r} to {total} partitions on "
                               f"{self.alias!r}: {error_text(code, message)}")


def _config_entry(raw: Any) -> ConfigEntry:
    # DescribeConfigs v1+: (name, value, read_only, config_source, is_sensitive, synonyms)
    # v0: (name, value, read_only, is_default, is_sensitive)
    name, value, read_only = raw[0], raw[1], bool(raw[2])
    if len(raw) >= 6:
        source = ConfigSource(raw[3]) if raw[3] in ConfigSource._value2member_map_ \
            else ConfigSource.UNKNOWN
        sensitive = bool(raw[4])
    else:
        source = ConfigSource.DEFAULT_CONFIG if raw[3] else ConfigSource.DYNAMIC_TOPIC_CONFIG
        sensitive = bool(raw[4])
    return ConfigEntry(name=name, value=value, source=source, read_only=read_only,
                       sensitive=sensitive)
