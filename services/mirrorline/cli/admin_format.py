"""Rendering of Admin API responses for `mirrorline admin`: pure functions, message -> text.

Nothing here talks to a server or reads the clock: the caller passes `now_ms` where an age
is shown. Conventions in the tables:

* ``?`` -- a value the server reports as unknown (a negative number such as ``-1`` for an
  end offset that has not been seen yet, the lag that follows from it, or a latency with no
  record copied yet);
* ``-`` -- nothing to show (no error, no worker, no heartbeat yet, no property set);
* states are the enum names without their prefix, in lower case (``running``,
  ``unassigned``); a value this client does not know is shown as its number;
* booleans are ``yes``/``no``, except the verdicts of a failover plan, shown as ``SAFE`` and
  ``NOT SAFE`` (flow: ``safe: YES``/``safe: NO``) so that a refusal stands out.

The cell formatters here are shared by the other renderers (`admin_format_failover` for
the failover and failback reports, `admin_heartbeat`, `admin_drift`), so that a value reads
the same in every table.

`--output json` uses `to_json`: the proto3 JSON mapping with the proto field names, every
field present (zeros and empty strings included), enums by name and 64-bit integers as
strings (as the proto3 JSON mapping has them).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from google.protobuf import json_format
from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.message import Message

from mirrorline.v1 import admin_pb2, flows_pb2

__all__ = [
    "NONE",
    "UNKNOWN",
    "escaped",
    "flow_state_name",
    "format_age",
    "format_bytes_rate",
    "format_count",
    "format_deleted",
    "format_flow",
    "format_flows",
    "format_import",
    "format_millis",
    "format_rate",
    "format_status",
    "format_utc",
    "format_workers",
    "one_line",
    "partition_state_name",
    "printable",
    "render_table",
    "to_dict",
    "to_json",
]

UNKNOWN = "?"
NONE = "-"

POLICY_KEY = "replication.policy.class"


# --------------------------------------------------------------------------- cells


def copy_path(p: flows_pb2.PartitionStatus) -> str:
    """How the partition is copied; why, where it is not as its batches (the default):
    the reason up to its first explanation, which would make the column as wide as a
    screen (`--output json` has it whole)."""
    if not p.copy_path:
        return NONE
    if p.copy_path == "records" and p.copy_path_reason:
        reason = p.copy_path_reason
        for cut in (": ", " (", ", which"):
            reason = reason.split(cut, 1)[0]
        return f"records: {reason}"
    return p.copy_path


def _state_name(enum: EnumDescriptor, prefix: str, value: int) -> str:
    entry = enum.values_by_number.get(value)
    return str(value) if entry is None else entry.name.removeprefix(prefix).lower()


def flow_state_name(value: int) -> str:
    """`FLOW_STATE_RUNNING` -> ``running``."""
    return _state_name(flows_pb2.FlowState.DESCRIPTOR, "FLOW_STATE_", value)


def partition_state_name(value: int) -> str:
    """`PARTITION_STATE_UNASSIGNED` -> ``unassigned``."""
    return _state_name(flows_pb2.PartitionState.DESCRIPTOR, "PARTITION_STATE_", value)


def format_count(value: int) -> str:
    """An offset or record count; negative means unknown."""
    return UNKNOWN if value < 0 else str(value)


def format_millis(value: float) -> str:
    """A duration in whole milliseconds; negative (or NaN) means unknown."""
    if math.isnan(value) or value < 0:
        return UNKNOWN
    return str(round(value))


def format_rate(value: float) -> str:
    """Records per second, one decimal."""
    if math.isnan(value) or value < 0:
        return UNKNOWN
    return f"{value:.1f}"


def format_bytes_rate(value: float) -> str:
    """Bytes per second in binary units: ``512 B``, ``1.5 KiB``, ``10.0 MiB``."""
    if math.isnan(value) or value < 0:
        return UNKNOWN
    if value < 1024:
        return f"{value:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


def format_age(age_ms: float) -> str:
    """``0.4s``, ``12.0s``, ``3m04s``, ``2h05m`` (a negative age, from clock skew, is 0)."""
    seconds = max(age_ms, 0.0) / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


#: What a terminal must never receive raw from a server's answer: C0 and C1 controls (ESC
#: starts an escape sequence that can move the cursor, retitle or rewrite the screen), DEL,
#: Unicode's bidirectional overrides and isolates and the line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029"
                      "\u202a-\u202e\u2066-\u2069]")
_KEEP = re.compile("[^\n\t]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xff else f"\\u{code:04x}"


def escaped(value: str) -> str:
    """One value with every control or bidi character written as an escape (`\\x1b`,
    `\\u202e`), line breaks and tabs included: what a server sent never drives the terminal."""
    return _CONTROL.sub(_escape, value)


def printable(text: str) -> str:
    """Rendered output as it may reach a terminal: like `escaped`, but the output's own
    line breaks and tabs stay."""
    return _CONTROL.sub(lambda m: m.group() if not _KEEP.match(m.group()) else _escape(m),
                        text)


def one_line(value: str) -> str:
    """A free-text cell on one line; empty -> ``-``."""
    flat = " ".join(value.split())
    return flat or NONE


def _timestamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def format_utc(ms: int) -> str:
    """Epoch milliseconds -> ``2026-11-21T04:03:00Z`` (milliseconds shown when not zero)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}"
    return text + "Z"


# --------------------------------------------------------------------------- tables


def render_table(headers: Sequence[str], rows: Iterable[Sequence[str]],
                 right: Iterable[int] = ()) -> str:
    """Columns separated by two spaces; `right` lists the right-aligned column indexes.

    The last column is not padded, so lines carry no trailing blanks.
    """
    table = [list(headers), *([str(cell) for cell in row] for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    align_right = set(right)
    lines = []
    for row in table:
        cells = [cell.rjust(widths[i]) if i in align_right else cell.ljust(widths[i])
                 for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# --------------------------------------------------------------------------- flows


def format_flows(flows: Iterable[admin_pb2.Flow]) -> str:
    """`flows list`: one line per flow, sorted by name."""
    ordered = sorted(flows, key=lambda f: f.name)
    if not ordered:
        return "no flows"
    rows = [
        (flow.name, flow_state_name(flow.state), "yes" if flow.paused else "no",
         str(flow.partitions), one_line(flow.spec.properties.get("topics", "")),
         one_line(flow.spec.properties.get(POLICY_KEY, "")), str(flow.version),
         one_line(flow.error))
        for flow in ordered
    ]
    return render_table(
        ("FLOW", "STATE", "PAUSED", "PARTITIONS", "TOPICS", "POLICY", "VERSION", "ERROR"),
        rows, right=(3, 6))


def format_flow(flow: admin_pb2.Flow) -> str:
    """One flow in detail (`flows get`, and the answer of create/update/pause/resume)."""
    fields = [
        ("flow", flow.name),
        ("source", flow.spec.source or NONE),
        ("target", flow.spec.target or NONE),
        ("state", flow_state_name(flow.state)),
        ("paused", "yes" if flow.paused else "no"),
        ("partitions", str(flow.partitions)),
        ("version", str(flow.version)),
        ("error", one_line(flow.error)),
    ]
    width = max(len(key) for key, _ in fields)
    lines = [f"{key.ljust(width)}  {value}" for key, value in fields]
    lines.append("properties:")
    if flow.spec.properties:
        lines += [f"  {escaped(key)} = {escaped(flow.spec.properties[key])}"
                  for key in sorted(flow.spec.properties)]
    else:
        lines.append(f"  {NONE}")
    return "\n".join(lines)


def format_deleted(response: admin_pb2.DeleteFlowResponse) -> str:
    return f"deleted flow {response.name}"


def format_import(response: admin_pb2.ImportFlowsResponse) -> str:
    """What an import did, one flow a line. Warnings are not included (they go to stderr)."""
    lines = [f"{verb} {name}"
             for verb, names in (("created", response.created), ("updated", response.updated),
                                 ("unchanged", response.unchanged))
             for name in names]
    return "\n".join(lines) if lines else "no flows in the file"


# --------------------------------------------------------------------------- status


def format_status(report: admin_pb2.StatusReport) -> str:
    """`status`: a header line, one summary line per flow, then one line per partition."""
    header = []
    if report.generated_at_ms > 0:
        header.append(f"at {_timestamp(report.generated_at_ms)}")
    if report.controller_id:
        header.append(f"controller {report.controller_id} (epoch {report.epoch})")
    parts = [", ".join(header)] if header else []

    flows = sorted(report.flows, key=lambda f: f.flow)
    if not flows:
        parts.append("no flows")
    else:
        parts.append(render_table(
            ("FLOW", "STATE", "PARTITIONS", "LAG RECORDS", "MAX LAG MS", "RECORDS/S",
             "BYTES/S", "ERROR"),
            ((f.flow, flow_state_name(f.state), str(f.partitions), format_count(f.lag_records),
              format_millis(f.max_lag_ms), format_rate(f.records_per_second),
              format_bytes_rate(f.bytes_per_second), one_line(f.error)) for f in flows),
            right=(2, 3, 4, 5, 6)))

    if report.audit:
        parts.append(render_table(
            ("FLOW", "AUDIT WINDOWS", "MISSING", "DUPLICATED", "AUDIT ERROR"),
            ((a.flow, ", ".join(f"{k} {v}" for k, v in sorted(a.windows_by_verdict.items()))
              or NONE, format_count(a.missing_records), format_count(a.duplicated_records),
              one_line(a.error)) for a in sorted(report.audit, key=lambda a: a.flow)),
            right=(2, 3)))

    partitions = sorted(report.partitions,
                        key=lambda p: (p.flow, p.source_topic, p.partition))
    if partitions:
        parts.append(render_table(
            ("FLOW", "TOPIC", "PARTITION", "WORKER", "END OFFSET", "NEXT OFFSET",
             "LAG RECORDS", "LAG MS", "STATE", "PATH", "ERROR"),
            ((p.flow, p.source_topic, str(p.partition), p.worker_id or NONE,
              format_count(p.source_end_offset), format_count(p.next_offset),
              format_count(p.lag_records), format_millis(p.lag_ms),
              partition_state_name(p.state), copy_path(p), one_line(p.error))
             for p in partitions),
            right=(2, 4, 5, 6, 7)))
    elif flows:
        parts.append("no partitions")
    on_spark = [p for p in partitions if p.worker_id.startswith("spark:")]
    if on_spark:
        parts.append(render_table(
            ("ON SPARK", "TOPIC", "PARTITION", "EXECUTOR", "MICRO-BATCH MS", "RECORDS/S"),
            ((p.flow, p.source_topic, str(p.partition), p.worker_id,
              format_millis(p.micro_batch_ms), format_rate(p.records_per_second))
             for p in on_spark), right=(2, 4, 5)))
    parts.extend(f"{p.executor_id} gave its partitions back to the workers: {p.problem}"
                 for p in report.spark_problems)
    return "\n\n".join(parts)


# --------------------------------------------------------------------------- workers


def format_workers(response: admin_pb2.ListWorkersResponse, now_ms: int) -> str:
    """`workers`: one line per worker, sorted by id; `now_ms` dates the heartbeat ages."""
    workers = sorted(response.workers, key=lambda w: w.worker_id)
    if not workers:
        return "no workers"
    rows = [
        (w.worker_id, w.address or NONE, "yes" if w.alive else "no",
         format_age(now_ms - w.last_heartbeat_ms) if w.last_heartbeat_ms > 0 else NONE,
         format_bytes_rate(w.bytes_per_second), format_rate(w.records_per_second),
         str(len(w.partitions)))
        for w in workers
    ]
    table = render_table(
        ("WORKER", "ADDRESS", "ALIVE", "HEARTBEAT AGE", "BYTES/S", "RECORDS/S", "PARTITIONS"),
        rows, right=(3, 4, 5, 6))
    notes = [f"{w.worker_id}: Spark executor, UI {w.ui_address or NONE}"
             + (f"; gave its partitions back: {w.problem}" if w.problem else "")
             for w in workers if w.kind == "spark"]
    return "\n".join([table, *notes])


# --------------------------------------------------------------------------- json


def to_dict(message: Message) -> dict[str, object]:
    """The proto3 JSON mapping of `message`, with proto field names and every field."""
    result: dict[str, object] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return result


def to_json(message: Message, *, compact: bool = False) -> str:
    """One JSON document; `compact` puts it on one line (as `status --watch` needs)."""
    return json.dumps(to_dict(message), indent=None if compact else 2)
