"""Which ACLs a flow copies to its target, and (in `full` mode) which it removes. Pure.

MM2's rules (syncTopicAcls, `sync.topic.acls.mode = mm2`, the default): only LITERAL TOPIC
ACLs whose topic the flow replicates; ALLOW WRITE is never copied, ALLOW ALL becomes
ALLOW READ (only the mirror writes to remote topics); the name becomes the remote topic's.
Nothing is ever deleted downstream. MM2's quirk is kept: a LITERAL ACL on `*` (Kafka's
wildcard) passes the default filter and becomes a literal ACL on the topic `<source>.*`.

`full` mode adds PREFIXED topic ACLs (the prefix is renamed by the policy, and must pass
the topic filter as if it were a topic name), LITERAL group ACLs for groups the
checkpointer mirrors (group names are not renamed), and removes downstream the ACLs this
service created that are gone upstream. What it created is recorded (in an internal topic
on the target, see `mirrorline.configsync.records`); an ACL it did not create -- even one
equal to a source ACL that already existed on the target -- is never removed.

Whatever the mode, `grants_write_on_remote_topic` is checked on every ACL before it is
planned: no ACL this service writes lets anyone write to a remote topic.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from mirrorline.core.filters import NamePredicate

ResourceType = Literal["TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN",
                       "USER", "UNKNOWN"]
PatternType = Literal["LITERAL", "PREFIXED", "UNKNOWN"]
Permission = Literal["ALLOW", "DENY", "UNKNOWN"]
AclMode = Literal["mm2", "full"]


@dataclass(frozen=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry."""

    resource_type: str
    name: str
    pattern: str
    principal: str
    host: str
    operation: str
    permission: str

    def key(self) -> str:
        """A stable identity, used as the record key of the ownership topic."""
        return json.dumps([self.resource_type, self.name, self.pattern, self.principal,
                           self.host, self.operation, self.permission])

    @classmethod
    def from_key(cls, key: str) -> AclBinding:
        fields = json.loads(key)
        if not isinstance(fields, list) or len(fields) != 7:
            raise ValueError(f"not an ACL binding key: {key!r}")
        return cls(*(str(f) for f in fields))

    def __str__(self) -> str:
        return (f"{self.permission} {self.principal}@{self.host} {self.operation} on "
                f"{self.resource_type} {self.pattern.lower()} {self.name!r}")


def grants_write_on_remote_topic(binding: AclBinding) -> bool:
    return (binding.resource_type == "TOPIC" and binding.permission == "ALLOW"
            and binding.operation in ("WRITE", "ALL"))


@dataclass(frozen=True)
class AclRules:
    """What one flow copies: its topic selection, renaming and group selection."""

    #: `should_replicate_topic` for the flow (topic filter, cycles, internal topics).
    replicates_topic: Callable[[str], bool]
    #: The policy's remote name of a source topic (or prefix).
    remote_name: Callable[[str], str]
    #: The flow's group filter (`groups`, `groups.exclude`).
    groups: NamePredicate
    mode: AclMode = "mm2"


def _downgraded(binding: AclBinding, name: str) -> AclBinding | None:
    """The remote-topic copy of a topic ACL: ALLOW WRITE dropped, ALLOW ALL -> READ."""
    if binding.permission == "ALLOW" and binding.operation == "WRITE":
        return None
    operation = "READ" if (binding.permission == "ALLOW"
                           and binding.operation == "ALL") else binding.operation
    return AclBinding("TOPIC", name, binding.pattern, binding.principal, binding.host,
                      operation, binding.permission)


def transform(binding: AclBinding, rules: AclRules) -> AclBinding | None:
    """The target ACL for one source ACL, or None when the flow does not copy it."""
    copied: AclBinding | None = None
    if binding.resource_type == "TOPIC" and binding.pattern == "LITERAL":
        if rules.replicates_topic(binding.name):
            copied = _downgraded(binding, rules.remote_name(binding.name))
    elif rules.mode != "full":
        return None
    elif binding.resource_type == "TOPIC" and binding.pattern == "PREFIXED":
        if binding.name and rules.replicates_topic(binding.name):
            copied = _downgraded(binding, rules.remote_name(binding.name))
    elif (binding.resource_type == "GROUP" and binding.pattern == "LITERAL"
          and rules.groups.accepts(binding.name)):
        copied = binding
    if copied is not None and grants_write_on_remote_topic(copied):
        return None  # the invariant, whatever the rules above become
    return copied


def desired_acls(source: Iterable[AclBinding], rules: AclRules) -> set[AclBinding]:
    out: set[AclBinding] = set()
    for binding in source:
        copied = transform(binding, rules)
        if copied is not None:
            out.add(copied)
    return out


@dataclass(frozen=True)
class AclPlan:
    add: tuple[AclBinding, ...]
    #: Only ever ACLs in the ownership record (full mode).
    remove: tuple[AclBinding, ...]
    #: The ownership record after the plan is applied.
    owned_after: frozenset[AclBinding]

    @property
    def empty(self) -> bool:
        return not self.add and not self.remove


def plan_acls(source: Iterable[AclBinding], target: Iterable[AclBinding],
              owned: Iterable[AclBinding], rules: AclRules) -> AclPlan:
    """What to add and remove on the target.

    `owned` is the record of ACLs this service created. Only those can be removed, and only
    when they still exist on the target and are no longer wanted. An ACL that already
    existed on the target is not added and therefore never becomes ours.
    """
    desired = desired_acls(source, rules)
    existing = set(target)
    still_ours = set(owned) & existing
    add = desired - existing
    remove = (still_ours - desired) if rules.mode == "full" else set()
    return AclPlan(add=tuple(sorted(add)), remove=tuple(sorted(remove)),
                   owned_after=frozenset((still_ours - remove) | add))
