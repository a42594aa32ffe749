"""Typed reading of MM2 property values, with MM2's (ConfigDef's) strictness.

Private helper of `mirrorline.core.config`. Every reader takes the already-trimmed string and
either returns the typed value or raises `BadValue` with a message that does *not* contain the
key or the line -- the loader adds those, because only it knows where the value came from
(top level, `<alias>.` or `<src>-><tgt>.`) and whether the value may be shown at all.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from mirrorline.core.errors import quoted
from mirrorline.core.policy import PolicyKind, policy_kind

SECURITY_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# Java's Long.parseLong: optional sign, ASCII digits only (Python's int() also takes "1_000"
# and non-ASCII digits, which MM2 would reject).
_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
# Kafka topic names may contain only these; aliases and separators end up inside topic names.
_TOPIC_CHARS: Final = re.compile(r"[A-Za-z0-9._-]+")
_INLINE_COMMENT: Final = re.compile(r"\s#")
_JAVA_LONG_MAX: Final = 2**63 - 1
_JAVA_SHORT_MAX: Final = 2**15 - 1
#: The longest `replication.policy.separator`: it is repeated in every remote topic name,
#: and topic names are limited to 249 characters.
MAX_SEPARATOR: Final = 16


class BadValue(ValueError):
    """A value that does not fit its key; the message is safe to show (no secret inside)."""


def is_secret(key: str) -> bool:
    """Keys whose values must never be shown (Kafka's PASSWORD-typed configs and friends)."""
    lowered = key.lower()
    return ("password" in lowered or "secret" in lowered
            or lowered.endswith(("sasl.jaas.config", "ssl.keystore.key")))


def shown(key: str, value: str) -> str:
    """The value as it may appear in a message: quoted, or hidden for secret keys."""
    return "[hidden]" if is_secret(key) else quoted(value)


def parse_bool(value: str) -> bool:
    """ConfigDef BOOLEAN: `true`/`false` in any case; anything else is an error."""
    lowered = value.lower()
    if lowered == "true":
        return True
    if lowered == "false":
        return False
    raise BadValue("must be true or false")


def has_inline_comment(value: str) -> bool:
    """Whether `value` looks like it carries a `# comment` (Java properties have none)."""
    return _INLINE_COMMENT.search(value) is not None


def parse_enabled(value: str) -> bool:
    """`enabled` of a flow: MM2's dedicated mode decides with Java's `Boolean.parseBoolean`,
    so `false # passive` (and even `true # active`) is false. Values without such a comment
    stay strict: `yes` is far more likely a mistake than a wish for false."""
    if has_inline_comment(value):
        return value.lower() == "true"
    return parse_bool(value)


def parse_naming_alias(value: str) -> str:
    """`source.cluster.alias` / `target.cluster.alias`: empty (names without a prefix) or
    characters allowed in topic names."""
    if value and not _TOPIC_CHARS.fullmatch(value):
        raise BadValue("may contain only the characters allowed in topic names "
                       "(letters, digits, '.', '_', '-'), or be empty")
    return value


def parse_non_negative(value: str, *, maximum: int = _JAVA_LONG_MAX) -> int:
    if not _INTEGER.fullmatch(value):
        raise BadValue("must be a whole number")
    number = int(value)
    if number < 0:
        raise BadValue("must not be negative")
    if number > maximum:
        raise BadValue(f"must be at most {maximum}")
    return number


def parse_positive(value: str) -> int:
    """A duration or interval that must be at least 1 (zero would mean "never" or "always")."""
    number = parse_non_negative(value)
    if number == 0:
        raise BadValue("must be at least 1")
    return number


def parse_replication_factor(value: str) -> int:
    """A replication factor: at least 1, or -1 for the broker's `default.replication.factor`."""
    if not _INTEGER.fullmatch(value):
        raise BadValue("must be a whole number (at least 1, or -1 for the broker default)")
    number = int(value)
    if number == -1:
        return number
    if number < 1:
        raise BadValue("must be at least 1, or -1 for the broker default")
    if number > _JAVA_SHORT_MAX:
        raise BadValue(f"must be at most {_JAVA_SHORT_MAX}")
    return number


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value not in allowed:
            raise BadValue("must be " + " or ".join(allowed))
        return value
    return parse


parse_location = _choice("source", "target")
parse_executor = _choice("workers", "spark", "auto")
parse_use_defaults_from = _choice("source", "target")
parse_sync_mode = _choice("apply", "plan")
parse_batch_path = _choice("auto", "on", "off")
parse_acls_mode = _choice("mm2", "full")


def parse_security_protocol(value: str) -> str:
    upper = value.upper()
    if upper not in SECURITY_PROTOCOLS:
        raise BadValue("must be one of " + ", ".join(SECURITY_PROTOCOLS))
    return upper


def parse_policy_class(value: str) -> PolicyKind:
    kind = policy_kind(value)
    if kind is None:
        raise BadValue(
            "unknown replication policy; Mirrorline implements "
            "org.apache.kafka.connect.mirror.DefaultReplicationPolicy and "
            "org.apache.kafka.connect.mirror.IdentityReplicationPolicy (also written "
            "DefaultReplicationPolicy / IdentityReplicationPolicy / default / identity)")
    return kind


def parse_separator(value: str) -> str:
    """Empty is allowed, as in MM2 (names become `<alias><topic>`); the loader warns."""
    if len(value) > MAX_SEPARATOR:
        raise BadValue(f"is {len(value)} characters long; at most {MAX_SEPARATOR} "
                       "(topic names are limited to 249 characters)")
    if value and not _TOPIC_CHARS.fullmatch(value):
        raise BadValue("may contain only the characters allowed in topic names "
                       "(letters, digits, '.', '_', '-')")
    return value


def alias_problem(alias: str) -> str | None:
    """Why `alias` cannot be a cluster alias, or None. Aliases become parts of topic names."""
    if not alias:
        return "contains an empty cluster alias"
    if not _TOPIC_CHARS.fullmatch(alias):
        return (f"cluster alias {alias!r} contains characters that are not allowed in topic "
                "names (only letters, digits, '.', '_', '-')")
    return None
