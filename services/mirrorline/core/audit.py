"""What the audit trail records of a request: its fields, secrets masked.

Secret-looking keys (`*password*`, `sasl.jaas.config`, ...) are masked wherever they
appear -- as map keys, or as entries of an imported properties text, read by the
properties loader's own parser -- so the control log, which every service reads, never
holds a secret.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from mirrorline.core._config_keys import is_secret
from mirrorline.core.errors import ConfigError
from mirrorline.core.properties import format_property, parse_properties

#: Longest argument kept in an entry (an imported file is summarised, not stored whole).
MAX_ARGUMENT = 4096


def _mask_properties(text: str) -> str:
    """`text` itself when it sets no secret-looking key; otherwise every entry again, one
    a line, secrets `[hidden]`. Parsed by the loader's own parser (`:`, `=` or blank
    separators, continuation lines, escapes in keys), so a key the loader would read as a
    password is masked however it is written."""
    try:
        entries = parse_properties(text)
    except ConfigError:  # a malformed \uXXXX escape: nothing of it is kept
        return f"[hidden: not valid properties text, {len(text)} characters]"
    if not any(is_secret(entry.key) for entry in entries):
        return text
    return "\n".join(format_property(e.key, "[hidden]" if is_secret(e.key) else e.value)
                     for e in entries)


def _mask(value: Any, name: str = "") -> Any:
    if isinstance(value, dict):
        return {k: "[hidden]" if is_secret(k) else _mask(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v, name) for v in value]
    if isinstance(value, str) and (name == "properties" or "\n" in value or "\r" in value):
        return _mask_properties(value)
    return value


def arguments(request: Message) -> dict[str, str]:
    """The request's fields as strings (JSON for structures), secrets masked."""
    fields = MessageToDict(request, preserving_proto_field_name=True)
    out: dict[str, str] = {}
    for name, value in sorted(fields.items()):
        masked = _mask(value, name)
        text = masked if isinstance(masked, str) else json.dumps(masked, sort_keys=True)
        if len(text) > MAX_ARGUMENT:
            text = text[:MAX_ARGUMENT] + f"... ({len(text)} characters)"
        out[name] = text
    return out


def flow_of(request: Message) -> str:
    """The flow a request concerns, if it names one."""
    for name in ("flow", "name"):
        if name in request.DESCRIPTOR.fields_by_name:
            value = getattr(request, name)
            if isinstance(value, str) and "->" in value:
                return value
    if "spec" in request.DESCRIPTOR.fields_by_name:
        spec = getattr(request, "spec")  # noqa: B009 -- a field, not an attribute
        if spec.source:
            return f"{spec.source}->{spec.target}"
    return ""
