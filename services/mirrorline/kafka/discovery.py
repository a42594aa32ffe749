"""Which source topics a flow replicates, and making sure their remote topics exist.

Runs at start and every `refresh.topics.interval.seconds`. New remote topics get the
source's partition count and its non-excluded, non-default configs (MM2's creation
rule). Everything after creation -- config sync and partition growth -- belongs to the
config-sync service (`mirrorline.configsync`), one owner for each change. A remote topic
with fewer partitions than its source is replicated for the partitions both have, and the
rest are reported as not replicated until the config-sync service has grown it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mirrorline.core.filters import (
    ConfigPropertyFilter,
    TopicFilter,
    configs_for_new_topic,
    should_replicate_topic,
)
from mirrorline.core.policy import ReplicationPolicy
from mirrorline.core.settings import FlowSettings
from mirrorline.kafka.admin import ClusterAdmin, TopicSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RemoteTopic:
    name: str
    #: Partitions that can be replicated now: min(source, target) partition counts.
    partitions: int


@dataclass
class DiscoveryResult:
    topics: dict[str, RemoteTopic] = field(default_factory=dict)
    #: Source topic -> why it is not (fully) replicated.
    problems: dict[str, str] = field(default_factory=dict)
    #: Source topics whose remote topic was created but is not in the target's metadata
    #: yet: the next refresh should come soon, not a whole interval later.
    pending: set[str] = field(default_factory=set)


class TopicDiscovery:
    def __init__(self, flow: FlowSettings, policy: ReplicationPolicy, *,
                 source: ClusterAdmin, target: ClusterAdmin) -> None:
        self.flow = flow
        self.policy = policy
        self._source = source
        self._target = target
        self._topic_filter = TopicFilter(flow.topics, flow.topics_exclude)
        self._config_filter = ConfigPropertyFilter(flow.config_properties_exclude,
                                                   flow.use_defaults_from)

    def selects(self, topic: str) -> bool:
        return should_replicate_topic(
            topic, policy=self.policy, topic_filter=self._topic_filter,
            target_alias=self.flow.naming_target,
            heartbeats_replication_enabled=self.flow.heartbeats_replication_enabled,
            canary_enabled=self.flow.canary.enabled)

    async def refresh(self) -> DiscoveryResult:
        result = DiscoveryResult()
        source_topics = await self._source.topic_partitions()
        selected = {t: n for t, n in source_topics.items() if self.selects(t)}
        remote = {t: self.policy.format_remote_topic(self.flow.naming_source, t) for t in selected}
        existing = await self._target.topic_partitions(remote.values())
        missing = [t for t in selected if remote[t] not in existing]
        if missing:
            await self._create(missing, selected, remote, result)
            # A topic just created may not be in the target's next metadata answer yet:
            # wait for it (briefly), or it would be copied only a refresh interval later.
            created = [remote[t] for t in missing if t not in result.problems]
            existing.update(await self._target.wait_visible(created))
            result.pending = {t for t in missing
                              if t not in result.problems and remote[t] not in existing}
        for topic, count in selected.items():
            name = remote[topic]
            if name not in existing:
                result.problems.setdefault(topic, f"remote topic {name!r} does not exist yet")
                continue
            have = existing[name]
            if have < count:
                result.problems[topic] = (
                    f"source topic has {count} partitions but remote topic {name!r} has "
                    f"{have}: partitions {have}..{count - 1} are not replicated until the "
                    "config-sync service grows it")
            result.topics[topic] = RemoteTopic(name, min(have, count))
        return result

    async def _create(self, missing: list[str], counts: dict[str, int],
                      remote: dict[str, str], result: DiscoveryResult) -> None:
        try:
            configs = await self._source.topic_configs(missing)
        except Exception as exc:
            log.warning("%s: cannot read source topic configs (%r); creating remote topics "
                        "with target defaults", self.flow.name, exc)
            configs = {}
        specs = [
            TopicSpec(remote[t], counts[t], self.flow.replication_factor,
                      configs_for_new_topic(configs.get(t, []), self._config_filter))
            for t in missing
        ]
        errors = await self._target.create_topics(specs)
        for topic in missing:
            error = errors.get(remote[topic])
            if error:
                result.problems[topic] = (f"cannot create remote topic {remote[topic]!r} on "
                                          f"{self.flow.target!r}: {error}")
                log.error("%s: %s", self.flow.name, result.problems[topic])
            else:
                log.info("%s: created remote topic %s (%d partitions)", self.flow.name,
                         remote[topic], counts[topic])
