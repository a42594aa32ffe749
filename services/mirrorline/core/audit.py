"""What the audit trail records of a request: its fields, secrets masked.

Secret-looking keys (`*password*`, `sasl.jaas.config`, ...) are masked wherever they
appear -- as map keys, or as `key = value` lines of an imported properties text -- so
the control log, which every service reads, never holds a secret.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from mirrorline.core._config_keys import is_secret
from mirrorline.core.config import redact

#: Longest argument kept in an entry (an imported file is summarised, not stored whole).
MAX_ARGUMENT = 4096


def _mask_properties(text: str) -> str:
    out = []
    for line in text.splitlines():
        for sep in ("=", ":", " "):
            if sep in line:
                key = line.split(sep, 1)[0].strip()
                if is_secret(key):
                    line = f"{key} = [hidden]"
                break
        out.append(line)
    return "\n".join(out)


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (redact(k, v) if isinstance(v, str) else _mask(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    if isinstance(value, str) and "\n" in value:
        return _mask_properties(value)
    return value


def arguments(request: Message) -> dict[str, str]:
    """The request's fields as strings (JSON for structures), secrets masked."""
    fields = MessageToDict(request, preserving_proto_field_name=True)
    out: dict[str, str] = {}
    for name, value in sorted(fields.items()):
        masked = _mask(value)
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
