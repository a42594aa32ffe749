"""Flow definitions: what the control log stores about a flow, and the settings it yields.

A flow *definition* is its MM2 flow-level properties (topics, filters, policy,
intervals, ...). The control log holds each flow's complete definition, so that once the
log exists, editing the properties file cannot change a flow behind the operator's back.
Everything else in the file -- clusters, connections, security, client overrides --
belongs to the deployment and is still read from the file.

Settings for the log's flows are produced by the one config loader: the file's
deployment part and the log's definitions are written out as properties text and
parsed, so a definition is validated exactly like a file would be.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirrorline.core._config_keys import DEPRECATED_ALIASES, FLOW_KEYS
from mirrorline.core._config_providers import has_reference
from mirrorline.core.config import parse_config
from mirrorline.core.errors import ConfigError, quoted
from mirrorline.core.properties import format_property, last_wins, parse_properties
from mirrorline.core.settings import FlowSettings, MirrorSettings

#: Properties that make up a flow definition ("enabled" is the flow's existence itself).
DEFINITION_KEYS = frozenset(FLOW_KEYS - {"enabled"})
_DEPRECATED_OF = {new: old for old, new in DEPRECATED_ALIASES.items()}


@dataclass(frozen=True)
class Definition:
    source: str
    target: str
    properties: Mapping[str, str]

    @property
    def name(self) -> str:
        return f"{self.source}->{self.target}"


def file_definitions(settings: MirrorSettings) -> dict[str, Definition]:
    """The definitions of the file's enabled flows: every definition key the file sets,
    at top level or for the flow (the flow's own value wins)."""
    raw = settings.raw
    out: dict[str, Definition] = {}
    for name, flow in sorted(settings.flows.items()):
        if not flow.enabled:
            continue
        props: dict[str, str] = {}
        for key in sorted(DEFINITION_KEYS):
            value = raw.get(f"{name}.{key}", raw.get(key))
            if value is None and key in _DEPRECATED_OF:  # `topics.blacklist` & co.
                old = _DEPRECATED_OF[key]
                value = raw.get(f"{name}.{old}", raw.get(old))
            if value is not None:
                props[key] = value.strip()
        out[name] = Definition(flow.source, flow.target, props)
    return out


def file_defaults(settings: MirrorSettings) -> dict[str, str]:
    """The file's top-level flow properties: what a flow created later starts from."""
    out = {key: value.strip() for key, value in sorted(settings.raw.items())
           if key in DEFINITION_KEYS}
    for old, new in DEPRECATED_ALIASES.items():
        if new not in out and old in settings.raw:
            out[new] = settings.raw[old].strip()
    return out


#: Characters no flow property may hold: C0 and C1 controls but tab (NUL, ESC starts a
#: terminal escape sequence), DEL, Unicode's bidirectional overrides and isolates, and the
#: line and paragraph separators. Each can rewrite or reorder what a viewer's terminal shows.
_UNPRINTABLE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028"
                          "\u2029\u202a-\u202e\u2066-\u2069]")


def check_keys(properties: Mapping[str, str]) -> None:
    """Only flow-level MM2 properties belong in a definition (secrets and client
    settings stay in the deployment's file, never in the control log), and their values
    hold no control, bidi or terminal escape characters."""
    for key in sorted(properties):
        if key not in DEFINITION_KEYS:
            raise ConfigError(_shown_key(key),
                              "is not a flow property (flow properties are MM2's "
                              "connector keys such as topics, topics.exclude, "
                              "replication.policy.class, offset.lag.max; cluster and "
                              "client settings belong in the properties file)")
        found = _UNPRINTABLE.search(properties[key])
        if found is not None:
            raise ConfigError(key, f"holds U+{ord(found.group()):04X} at position "
                                   f"{found.start()}: flow properties may not hold control, "
                                   "bidirectional or terminal escape characters")


def _file_values(deployment: MirrorSettings, key: str) -> set[str]:
    """What the deployment's file writes for `key`, at top level or for any of its flows
    (a reverse flow made by a failback carries its forward flow's properties)."""
    names = {key} | {old for old, new in DEPRECATED_ALIASES.items() if new == key}
    found: set[str] = set()
    for raw_key, value in deployment.raw.items():
        for name in names:
            if raw_key == name:
                found.add(value.strip())
            elif raw_key.endswith("." + name):
                source, arrow, target = raw_key[:-len(name) - 1].partition("->")
                if arrow and source in deployment.clusters and target in deployment.clusters:
                    found.add(value.strip())
    return found


def check_references(deployment: MirrorSettings, definition: Definition) -> None:
    """Config providers resolve only what the deployment's file writes.

    A `${provider:path:key}` reference in a definition is refused unless it is, character
    for character, a value the file itself writes for that property (top level or for one
    of its flows: a flow seeded or imported from the file): it then resolves to what the
    file configures anyway. Any other reference -- sent through the Admin API, imported,
    or forged in the control log -- would let its author read the controller's files and
    environment.
    """
    for key, value in sorted(definition.properties.items()):
        if has_reference(value) and value.strip() not in _file_values(deployment, key):
            raise ConfigError(f"{definition.name}.{key}", (
                "holds a config provider reference (${...}); config providers resolve only "
                "the deployment's own properties file, never flow properties sent through "
                "the Admin API or an import: write the value itself"))


def compose(deployment: MirrorSettings, definitions: Iterable[Definition], *,
            source: str = "control log") -> MirrorSettings:
    """Settings of the given flows: the file's deployment part plus these definitions.

    Raises ConfigError naming the property (as `<source>-><target>.<key>`) when a
    definition is invalid, or the flow names a cluster the deployment does not know.
    """
    definitions = list(definitions)
    pairs = {f"{a}->{b}." for a in deployment.clusters for b in deployment.clusters if a != b}
    lines: list[str] = []
    for key, value in deployment.raw.items():
        if key == "enabled" or key in DEFINITION_KEYS:
            continue
        prefix = next((p for p in pairs if key.startswith(p)), None)
        if prefix is not None:
            rest = key[len(prefix):]
            if rest == "enabled" or rest in DEFINITION_KEYS:
                continue
        lines.append(format_property(key, value))
    for d in definitions:
        for alias, side in ((d.source, "source"), (d.target, "target")):
            if alias not in deployment.clusters:
                raise ConfigError(side, f"unknown cluster {alias!r}: the deployment's "
                                        f"clusters are {', '.join(deployment.clusters)}")
        if d.source == d.target:
            raise ConfigError("target", "a flow needs two different clusters")
        check_keys(d.properties)
        check_references(deployment, d)
        lines.append(format_property(f"{d.name}.enabled", "true"))
        lines.extend(format_property(f"{d.name}.{k}", v) for k, v in sorted(d.properties.items()))
    return parse_config("\n".join(lines) + "\n", source=source, lookups=deployment.lookups)


def flow_settings(deployment: MirrorSettings, definition: Definition) -> FlowSettings:
    return compose(deployment, [definition]).flows[definition.name]


def property_of(error: ConfigError, definition: Definition) -> str:
    """The definition property an error is about (`topics`, not `a->b.topics`)."""
    key = error.key or ""
    prefix = f"{definition.name}."
    return key[len(prefix):] if key.startswith(prefix) else key


def differences(file: Mapping[str, Definition], log: Mapping[str, Definition]) -> list[str]:
    """Human-readable differences between the file's flows and the control log's."""
    out: list[str] = []
    for name in sorted(set(file) | set(log)):
        in_file, in_log = file.get(name), log.get(name)
        if in_log is None:
            out.append(f"flow {name} is enabled in the file but not defined in the control log")
        elif in_file is None:
            out.append(f"flow {name} is defined in the control log but not enabled in the file")
        else:
            for key in sorted(set(in_file.properties) | set(in_log.properties)):
                a, b = in_file.properties.get(key), in_log.properties.get(key)
                if a != b:
                    out.append(f"flow {name}: {key} is {_shown(a)} in the file but "
                               f"{_shown(b)} in the control log")
    return out


def _shown(value: str | None) -> str:
    return "unset" if value is None else repr(value)


# -- importing flows ------------------------------------------------------------------------

#: Most flows one import may name: enough for any real deployment, and cheap to validate.
MAX_IMPORT_FLOWS = 256
#: Most ignored keys an import's reply names one by one: the reply stays far below gRPC's
#: message limit whatever the import holds (a reply over it would reach the caller as
#: RESOURCE_EXHAUSTED after the flows were applied).
MAX_IMPORT_WARNINGS = 50
_FLOW_KEY = re.compile(r"^([^\s>]+?)->([^\s>]+?)\.(.+)$")


def flow_level_text(text: str, *, source: str | None = None) -> tuple[str, list[str]]:
    """The part of a properties file that defines flows, and the keys left out.

    The CLI sends only this to `ImportFlows`: flows' `enabled` flags and definition keys,
    top-level or per flow. Cluster connections, client and security settings (and every
    secret) stay on the operator's machine.
    """
    kept: list[str] = []
    dropped: list[str] = []
    for key, entry in last_wins(parse_properties(text, source=source)).items():
        if _is_flow_level(key):
            kept.append(format_property(key, entry.value))
        else:
            dropped.append(key)
    return "\n".join(kept) + "\n", dropped


def _shown_key(key: str) -> str:
    return key if key.isprintable() and len(key) <= 100 else quoted(key, 100)


def _is_flow_level(key: str) -> bool:
    if key in DEFINITION_KEYS:
        return True
    m = _FLOW_KEY.match(key)
    return m is not None and (m.group(3) == "enabled" or m.group(3) in DEFINITION_KEYS)


def import_definitions(text: str, *, source: str | None = None
                       ) -> tuple[dict[str, Definition], list[str]]:
    """The flows an imported text enables, with their definitions, and warnings.

    Keys that are not flow-level are ignored with a warning naming them (never their
    values); the clusters are the deployment's, not the text's, so an import cannot make
    the controller build settings for cluster pairs that do not exist. More than
    `MAX_IMPORT_FLOWS` flows is refused before any of them is built.
    """
    raw = {k: e.value.strip() for k, e in last_wins(parse_properties(text, source=source)).items()}
    ignored = [key for key in sorted(raw) if not _is_flow_level(key)]
    warnings = [f"{_shown_key(key)}: ignored (only flow properties are imported; cluster, "
                "client and security settings come from the deployment's own file)"
                for key in ignored[:MAX_IMPORT_WARNINGS]]
    if len(ignored) > MAX_IMPORT_WARNINGS:
        warnings.append(f"... and {len(ignored) - MAX_IMPORT_WARNINGS} more keys ignored")
    enabled: list[tuple[str, str]] = []
    for key, value in raw.items():
        m = _FLOW_KEY.match(key)
        if m is not None and m.group(3) == "enabled":
            if value.lower() not in ("true", "false"):
                raise ConfigError(_shown_key(key), f"must be true or false, not {quoted(value)}")
            if value.lower() == "true":
                enabled.append((m.group(1), m.group(2)))
                if len(enabled) > MAX_IMPORT_FLOWS:
                    raise ConfigError(key, f"more than {MAX_IMPORT_FLOWS} flows in one import")
    if not enabled:
        raise ConfigError(None, "no flow is enabled (set <source>-><target>.enabled = true)",
                          source=source)
    out: dict[str, Definition] = {}
    for source_alias, target_alias in sorted(enabled):
        name = f"{source_alias}->{target_alias}"
        props = {key: raw.get(f"{name}.{key}", raw.get(key, "")) for key in sorted(DEFINITION_KEYS)
                 if f"{name}.{key}" in raw or key in raw}
        out[name] = Definition(source_alias, target_alias, props)
    return out, warnings
