"""Sorting the keys of an MM2 file into its three levels, and judging each key.

Private helper of `mirrorline.core.config`. An MM2 file is flat: whether `backup.topics` is a
top-level key or the key `topics` of cluster `backup` depends on `clusters`, and `a->b.x` is
the key `x` of flow `a->b`. `Layers` holds the three views so the loader can resolve a setting
by looking in the right places in the right order, and `unknown_key_warnings` names every key
that would have no effect -- MM2 drops such keys silently, which hides typos for months.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mirrorline.core import _config_keys as keys
from mirrorline.core.errors import ConfigError
from mirrorline.core.properties import Property
from mirrorline.core.settings import ConfigWarning
from mirrorline.core.typos import MIN_NAME, close_matches, or_list

FlowKey = tuple[str, str]

_UNKNOWN = "unknown key, ignored (MM2 would ignore it silently; check the spelling)"
_UNKNOWN_MIRRORLINE = "unknown Mirrorline setting, ignored (check the spelling)"
_NOT_LISTED = "looks like a setting of cluster"


@dataclass
class Layers:
    """Every (last-wins) entry, filed under the level(s) it belongs to.

    Each store maps the key *without* its level prefix to the original entry, so messages can
    name the key exactly as written (`Property.key`) together with its line.
    """

    top: dict[str, Property] = field(default_factory=dict)
    clusters: dict[str, dict[str, Property]] = field(default_factory=dict)
    flows: dict[FlowKey, dict[str, Property]] = field(default_factory=dict)

    def flow(self, source: str, target: str) -> dict[str, Property]:
        return self.flows.get((source, target), {})

    def cluster(self, alias: str) -> dict[str, Property]:
        return self.clusters.get(alias, {})


def split_levels(entries: Iterable[Property], aliases: tuple[str, ...],
                 source: str | None) -> Layers:
    """File each entry as a flow, cluster and/or top-level key.

    A key starting with `<alias>.` belongs to that cluster; it is *also* read as a top-level
    key when that reading is an MM2 connector property (alias `sync` and
    `sync.topic.acls.enabled`), as MM2 does -- but never as a top-level client or connection
    key, which would silently reach every cluster's clients.
    """
    layers = Layers(clusters={alias: {} for alias in aliases})
    for entry in entries:
        if "->" in entry.key:
            source_alias, target_alias, rest = _split_flow_key(entry, aliases, source)
            layers.flows.setdefault((source_alias, target_alias), {})[rest] = entry
            continue
        owners = [alias for alias in aliases if entry.key.startswith(alias + ".")]
        for alias in owners:
            layers.clusters[alias][entry.key[len(alias) + 1:]] = entry
        if not owners or _also_top_level(entry.key):
            layers.top[entry.key] = entry
    return layers


def _also_top_level(key: str) -> bool:
    return (keys.top_level_status(key) is keys.Status.USED
            and not keys.is_connection_key(key) and not keys.is_client_key(key))


def _split_flow_key(entry: Property, aliases: tuple[str, ...],
                    source: str | None) -> tuple[str, str, str]:
    """`a->b.rest` -> (a, b, rest); both aliases must be listed in `clusters` and differ."""
    source_alias, _, remainder = entry.key.partition("->")

    def fail(message: str) -> ConfigError:
        return ConfigError(entry.key, message, line=entry.line, source=source)

    if source_alias not in aliases:
        raise fail(f"flow source {source_alias!r} is not a cluster listed in clusters"
                   + _alias_hint(source_alias, aliases))
    matches = [a for a in aliases if remainder.startswith(a + ".")]
    if not matches:
        target_alias = remainder.split(".", 1)[0]
        if target_alias == remainder or target_alias in aliases:
            raise fail("a flow key needs a setting after the flow, e.g. "
                       f"{source_alias}->{remainder}.enabled")
        raise fail(f"flow target {target_alias!r} is not a cluster listed in clusters"
                   + _alias_hint(target_alias, aliases))
    target_alias = max(matches, key=len)
    if target_alias == source_alias:
        raise fail(f"a flow needs two different clusters, not {source_alias}->{target_alias}")
    rest = remainder[len(target_alias) + 1:]
    if not rest:
        raise fail("a flow key needs a setting after the flow, e.g. "
                   f"{source_alias}->{target_alias}.enabled")
    return source_alias, target_alias, rest


def _alias_hint(alias: str, aliases: tuple[str, ...]) -> str:
    near = close_matches(alias, [a for a in aliases if len(a) >= MIN_NAME])
    return f" -- did you mean {or_list(repr(a) for a in near)}?" if near else ""


def unknown_key_warnings(entries: Iterable[Property], layers: Layers,
                         aliases: tuple[str, ...]) -> list[ConfigWarning]:
    """A warning for every key that has no effect in Mirrorline, in file order.

    An unknown key nearly equal to a known one (`mirrorline.core.typos`) is a likely typo:
    its warning asks "did you mean ...?" and carries the suggestions.
    """
    warnings: list[ConfigWarning] = []
    for entry in sorted(entries, key=lambda e: e.line):
        message = _judge(entry, layers, aliases)
        if message is None:
            continue
        suggestions: tuple[str, ...] = ()
        if message in (_UNKNOWN, _UNKNOWN_MIRRORLINE) or message.startswith(_NOT_LISTED):
            suggestions = suggest(entry.key, aliases)
        if suggestions:
            what = message if message.startswith(_NOT_LISTED) else "unknown key"
            message = (f"{what} -- did you mean {or_list(suggestions)}? `run` and the "
                       "services ignore it as if the line were not there (MM2 does too); "
                       "`mirrorline config check` rejects it")
        warnings.append(ConfigWarning(entry.key, message, entry.line, suggestions))
    return warnings


def suggest(key: str, aliases: tuple[str, ...]) -> tuple[str, ...]:
    """The known keys an unknown `key` (as written, with its level prefix) is nearly equal
    to, with the same level prefix: `a->b.topcis` -> `a->b.topics`,
    `a.bootstrap.server` -> `a.bootstrap.servers`, `primry.ssl.x` -> `primary.ssl.x`."""
    if "->" in key:
        source_alias, _, remainder = key.partition("->")
        target_alias = max((a for a in aliases if remainder.startswith(a + ".")), key=len)
        flow = f"{source_alias}->{target_alias}."
        rest = remainder[len(target_alias) + 1:]
        return tuple(flow + near for near in close_matches(
            rest, keys.FLOW_LEVEL_KEYS, keys.CLIENT_PREFIXES))
    owners = [alias for alias in aliases if key.startswith(alias + ".")]
    # A misspelt alias is guessed only when aliases are names, not letters (`c.x` is no
    # typo of `a.x`).
    scope = owners or [alias for alias in aliases if len(alias) >= MIN_NAME]
    exact = {f"{alias}.{known}" for alias in scope for known in keys.CLUSTER_LEVEL_KEYS}
    families = [f"{alias}.{family}" for alias in scope
                for family in keys.CLUSTER_LEVEL_FAMILIES]
    if not owners:
        exact |= keys.TOP_LEVEL_KEYS
        families += [*keys.TOP_LEVEL_FAMILIES,
                     *(f"{s}->{t}." for s in scope for t in scope if s != t)]
    return close_matches(key, exact, families)


def _judge(entry: Property, layers: Layers, aliases: tuple[str, ...]) -> str | None:
    key = entry.key
    if "->" in key:
        source_alias, target_alias, rest = _split_flow_key(entry, aliases, None)
        if keys.is_connection_key(rest):
            return (f"connection settings do not apply per flow (in MM2 neither); set "
                    f"<alias>.{rest} for a cluster, or {source_alias}->{target_alias}"
                    f".consumer.{rest} (or .producer., .admin.) for one client")
        return _message(keys.flow_level_status(rest), rest)
    owners = [alias for alias in aliases if key.startswith(alias + ".")]
    statuses = [keys.cluster_level_status(key[len(a) + 1:]) for a in owners]
    if key in layers.top:
        statuses.append(keys.top_level_status(key))
    if keys.Status.USED in statuses:
        return None
    never = next((k for k in (key, *(key[len(a) + 1:] for a in owners))
                  if k in keys.NEVER_MM2_KEYS), None)
    if never is not None:
        return _never_mm2(never)
    naming = next((key[len(a) + 1:] for a in owners
                   if key[len(a) + 1:] in keys.NAMING_ALIAS_KEYS), None)
    if naming is not None:
        return (f"{naming} has an effect only at top level or per flow "
                f"(<source>-><target>.{naming}); per cluster MM2 ignores it too")
    if owners and any(key[len(a) + 1:] in keys.FLOW_KEYS for a in owners):
        alias = owners[0]
        rest = key[len(alias) + 1:]
        return (f"{rest} is a replication setting, which has no effect per cluster (in MM2 "
                f"neither); set it at top level or per flow, e.g. <source>->{alias}.{rest}")
    if keys.Status.NO_EFFECT in statuses:
        return keys.NO_EFFECT
    if key.startswith("mirrorline."):
        return _UNKNOWN_MIRRORLINE
    first, _, rest = key.partition(".")
    if not owners and (keys.is_connection_key(rest) or rest.startswith(keys.CLIENT_PREFIXES)):
        return f"{_NOT_LISTED} {first!r}, which is not listed in clusters; ignored"
    return _UNKNOWN


def _message(status: keys.Status, rest: str) -> str | None:
    if status is keys.Status.USED:
        return None
    if rest in keys.NEVER_MM2_KEYS:
        return _never_mm2(rest)
    if status is keys.Status.NO_EFFECT:
        return keys.NO_EFFECT
    if rest.startswith("mirrorline."):
        return _UNKNOWN_MIRRORLINE
    return _UNKNOWN


def _never_mm2(key: str) -> str:
    include = keys.NEVER_MM2_KEYS[key]
    return (f"{key} was never an MM2 key (MM2's include list has always been {include}); "
            f"MM2 ignores it and so does Mirrorline -- write {include} instead")


def cluster_connection(layers: Layers, alias: str) -> dict[str, str]:
    """Connection keys of one cluster: top-level values overlaid by `<alias>.` values."""
    connection = {k: e.value for k, e in layers.top.items() if keys.is_connection_key(k)}
    connection.update({k: e.value for k, e in layers.cluster(alias).items()
                       if keys.is_connection_key(k)})
    return connection
