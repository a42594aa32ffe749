"""`mirrorline admin history`: the audit trail as a table."""

from __future__ import annotations

import datetime

from mirrorline.v1 import audit_pb2


def _when(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%SZ")


def format_history(response: audit_pb2.HistoryResponse) -> str:
    if not response.entries:
        return "no recorded changes"
    lines = [f"{'TIME':<21} {'WHO':<16} {'ROLE':<9} {'CALL':<16} {'FLOW':<22} OUTCOME"]
    for e in response.entries:
        lines.append(f"{_when(e.timestamp_ms):<21} {e.identity:<16} {e.role:<9} {e.rpc:<16} "
                     f"{e.flow or '-':<22} {e.outcome}")
        arguments = ", ".join(f"{k}={v}" for k, v in sorted(e.arguments.items())
                              if k not in ("name", "flow"))
        if arguments:
            lines.append(f"{'':<21} {arguments[:200]}")
        if e.detail:
            lines.append(f"{'':<21} {e.detail[:200]}")
    return "\n".join(lines)
