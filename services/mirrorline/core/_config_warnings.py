"""Warnings about MM2 idioms: what a file means in MM2, said where it is easy to miss.

Private helper of `mirrorline.core.config`. Each function returns warnings in file order;
none changes what the file means -- the loader reads every value as MM2 does, these only
say so: values with ` #` (Java properties have no inline comments), deprecated filter keys,
keys Mirrorline reads but does not act on yet, and an empty replication separator.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mirrorline.core import _config_keys as keys
from mirrorline.core import _config_values as values
from mirrorline.core._config_layers import Layers
from mirrorline.core.properties import Property
from mirrorline.core.settings import ConfigWarning, FlowSettings

__all__ = ["JAVA_TRIM", "PATTERN_KEYS", "idiom_warnings", "inline_comment_warnings",
           "separator_warnings"]

JAVA_TRIM: Final = "".join(chr(c) for c in range(0x21))  # what Java's String.trim() strips
#: Keys whose values are lists of regular expressions (their deprecated aliases included).
PATTERN_KEYS: Final = ("topics", "topics.exclude", "groups", "groups.exclude",
                       "config.properties.exclude", *keys.DEPRECATED_ALIASES)
_IDENTITY: Final = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


def inline_comment_warnings(raw: Mapping[str, Property],
                            layers: Layers) -> list[ConfigWarning]:
    """Java properties have no inline comments; ` # ...` silently becomes value."""
    switches = {"enabled"} | {store["enabled"].key for store in layers.flows.values()
                              if "enabled" in store}
    out = []
    for entry in sorted(raw.values(), key=lambda e: e.line):
        if not values.has_inline_comment(entry.value):
            continue
        shown = values.shown(entry.key, entry.value.strip(JAVA_TRIM))
        if entry.key in switches:
            effect = "MM2 reads this flag with Boolean.parseBoolean, so it is FALSE"
        elif any(entry.key.endswith(k) for k in PATTERN_KEYS):
            effect = ("the ' #...' is part of the regular expression, so the pattern "
                      "matches only names containing it")
        else:
            effect = "MM2 reads the whole text as the value (or rejects it)"
        out.append(ConfigWarning(entry.key, (
            f"INLINE COMMENT? the value {shown} contains ' #', but Java properties have "
            f"no inline comments: {effect}; put comments on their own line"), entry.line))
    return out


def idiom_warnings(layers: Layers) -> list[ConfigWarning]:
    """Deprecated aliases and keys Mirrorline reads but does not act on yet."""
    out = []
    for store in (layers.top, *layers.flows.values()):
        for rest, entry in store.items():
            new = keys.DEPRECATED_ALIASES.get(rest)
            if new is not None:
                message = (f"deprecated (MM2 renamed it to {new}); it still works and "
                           f"means the same -- rename it to {new}")
                if not entry.value:
                    message += "; an empty value excludes nothing, as in MM2"
                shadow = store.get(new) or layers.top.get(new)
                if shadow is not None:
                    message = (f"deprecated alias of {new}, and ignored: {new} is also set "
                               f"(line {shadow.line}) and wins, as in MM2")
                out.append(ConfigWarning(entry.key, message, entry.line))
            why = keys.NOT_YET_ACTED_ON.get(rest)
            if why is not None and rest in keys.FLOW_KEYS:
                out.append(ConfigWarning(entry.key, f"read and checked, but it has no "
                                         f"effect yet: {why}", entry.line))
    return out


def separator_warnings(layers: Layers,
                       flows: Mapping[str, FlowSettings]) -> list[ConfigWarning]:
    """An empty separator is legal MM2 but turns off what keeps flows loop-free."""
    out = []
    seen: set[int] = set()
    for flow in sorted(flows.values(), key=lambda f: not f.enabled):
        entry = (layers.flow(flow.source, flow.target).get("replication.policy.separator")
                 or layers.top.get("replication.policy.separator"))
        if (entry is None or entry.value or flow.policy.kind != "default"
                or entry.line in seen):
            continue
        seen.add(entry.line)
        example = flow.remote_topic("orders")
        out.append(ConfigWarning(entry.key, (
            "is empty: remote topics are named <source alias><topic> with nothing in "
            f"between (as in MM2; {flow.name} copies orders to {example}). A name can then "
            "no longer tell which cluster it came from, so replication loops (A->B->A) "
            "are no longer prevented; to keep topic names unchanged use "
            f"replication.policy.class = {_IDENTITY} instead"), entry.line))
    return out
