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

The failover and failback reports (`format_failover_plan`, `format_failback_plan`, ...)
are blocks of ``key: value`` lines and tables separated by blank lines; warnings of results
are not part of them (the caller prints them on stderr, as for an import).

`--output json` uses `to_json`: the proto3 JSON mapping with the proto field names, every
field present (zeros and empty strings included), enums by name and 64-bit integers as
strings (as the proto3 JSON mapping has them).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from google.protobuf import json_format
from google.protobuf.descriptor import EnumDescriptor
from google.protobuf.message import Message

from mirrorline.v1 import admin_pb2, failover_pb2, flows_pb2

__all__ = [
    "UNKNOWN",
    "flow_state_name",
    "format_age",
    "format_bytes_rate",
    "format_deleted",
    "format_failback_plan",
    "format_failback_result",
    "format_failover_plan",
    "format_failover_result",
    "format_flow",
    "format_flows",
    "format_import",
    "format_rate",
    "format_status",
    "format_translate",
    "format_translations",
    "format_workers",
    "partition_state_name",
    "quote_argument",
    "render_table",
    "to_dict",
    "to_json",
]

UNKNOWN = "?"
NONE = "-"

POLICY_KEY = "replication.policy.class"


# --------------------------------------------------------------------------- cells


def _state_name(enum: EnumDescriptor, prefix: str, value: int) -> str:
    entry = enum.values_by_number.get(value)
    return str(value) if entry is None else entry.name.removeprefix(prefix).lower()


def flow_state_name(value: int) -> str:
    """`FLOW_STATE_RUNNING` -> ``running``."""
    return _state_name(flows_pb2.FlowState.DESCRIPTOR, "FLOW_STATE_", value)


def partition_state_name(value: int) -> str:
    """`PARTITION_STATE_UNASSIGNED` -> ``unassigned``."""
    return _state_name(flows_pb2.PartitionState.DESCRIPTOR, "PARTITION_STATE_", value)


def _count(value: int) -> str:
    """An offset or record count; negative means unknown."""
    return UNKNOWN if value < 0 else str(value)


def _millis(value: float) -> str:
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


def _text(value: str) -> str:
    """A free-text cell on one line; empty -> ``-``."""
    flat = " ".join(value.split())
    return flat or NONE


def _timestamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


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
         str(flow.partitions), _text(flow.spec.properties.get("topics", "")),
         _text(flow.spec.properties.get(POLICY_KEY, "")), str(flow.version), _text(flow.error))
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
        ("error", _text(flow.error)),
    ]
    width = max(len(key) for key, _ in fields)
    lines = [f"{key.ljust(width)}  {value}" for key, value in fields]
    lines.append("properties:")
    if flow.spec.properties:
        lines += [f"  {key} = {flow.spec.properties[key]}"
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
            ((f.flow, flow_state_name(f.state), str(f.partitions), _count(f.lag_records),
              _millis(f.max_lag_ms), format_rate(f.records_per_second),
              format_bytes_rate(f.bytes_per_second), _text(f.error)) for f in flows),
            right=(2, 3, 4, 5, 6)))

    if report.audit:
        parts.append(render_table(
            ("FLOW", "AUDIT WINDOWS", "MISSING", "DUPLICATED", "AUDIT ERROR"),
            ((a.flow, ", ".join(f"{k} {v}" for k, v in sorted(a.windows_by_verdict.items()))
              or NONE, _count(a.missing_records), _count(a.duplicated_records),
              _text(a.error)) for a in sorted(report.audit, key=lambda a: a.flow)),
            right=(2, 3)))

    partitions = sorted(report.partitions,
                        key=lambda p: (p.flow, p.source_topic, p.partition))
    if partitions:
        parts.append(render_table(
            ("FLOW", "TOPIC", "PARTITION", "WORKER", "END OFFSET", "NEXT OFFSET",
             "LAG RECORDS", "LAG MS", "STATE", "ERROR"),
            ((p.flow, p.source_topic, str(p.partition), p.worker_id or NONE,
              _count(p.source_end_offset), _count(p.next_offset), _count(p.lag_records),
              _millis(p.lag_ms), partition_state_name(p.state), _text(p.error))
             for p in partitions),
            right=(2, 4, 5, 6, 7)))
    elif flows:
        parts.append("no partitions")
    on_spark = [p for p in partitions if p.worker_id.startswith("spark:")]
    if on_spark:
        parts.append(render_table(
            ("ON SPARK", "TOPIC", "PARTITION", "EXECUTOR", "MICRO-BATCH MS", "RECORDS/S"),
            ((p.flow, p.source_topic, str(p.partition), p.worker_id,
              _millis(p.micro_batch_ms), format_rate(p.records_per_second))
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


# --------------------------------------------------------------------------- offsets


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def _utc(ms: int) -> str:
    """Epoch milliseconds -> ``2026-11-21T04:03:00Z`` (milliseconds shown when not zero)."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if ms % 1000:
        text += f".{ms % 1000:03d}"
    return text + "Z"


def format_translations(partitions: Iterable[failover_pb2.OffsetTranslation]) -> str:
    """One line per partition of a group, sorted by topic and partition; ``?`` for an offset
    the server reports as -1 (no committed offset, no translation possible)."""
    ordered = sorted(partitions, key=lambda p: (p.topic, p.partition))
    if not ordered:
        return "no partitions"
    return render_table(
        ("TOPIC", "PARTITION", "TARGET TOPIC", "SOURCE OFFSET", "TARGET OFFSET", "EXACT",
         "MAX DUPLICATES", "BASIS"),
        ((p.topic, str(p.partition), p.target_topic or NONE, _count(p.source_offset),
          _count(p.target_offset), _yes_no(p.exact), _count(p.max_duplicates),
          _text(p.basis)) for p in ordered),
        right=(1, 3, 4, 6))


def format_translate(response: failover_pb2.TranslateOffsetsResponse) -> str:
    """`offsets translate`: a header line, then the partitions."""
    return (f"flow {response.flow}, group {response.group}\n\n"
            + format_translations(response.partitions))


# --------------------------------------------------------------------------- failover


def _key_values(fields: Sequence[tuple[str, str]], indent: str = "") -> list[str]:
    width = max(len(key) for key, _ in fields) + 1
    return [f"{indent}{(key + ':').ljust(width)}  {value}" for key, value in fields]


def _checkpoint_age(age_ms: int) -> str:
    return "none" if age_ms < 0 else format_age(age_ms)


def _bullets(items: Iterable[str], indent: str = "  ") -> list[str]:
    return [f"{indent}- {_text(item)}" for item in items]


def _group_readiness(group: failover_pb2.GroupReadiness) -> str:
    lines = [f"group {group.group}: {'SAFE' if group.safe else 'NOT SAFE'}"]
    lines += _key_values((
        ("expected duplicates", _count(group.expected_duplicates)),
        ("records not mirrored", _count(group.records_not_mirrored)),
        ("checkpoint age", _checkpoint_age(group.checkpoint_age_ms)),
        ("active members on target", str(group.active_members_on_target)),
    ), indent="  ")
    if group.reasons:
        lines.append("  reasons:")
        lines += _bullets(group.reasons, indent="    ")
    elif not group.safe:
        lines.append("  reasons: none given")
    return "\n".join(lines) + "\n\n" + format_translations(group.partitions)


def format_failover_plan(plan: failover_pb2.FailoverPlan) -> str:
    """`failover plan`: the flow line, then each group (in the server's order) with its
    verdict, figures, reasons and partitions. A plan that is not safe starts with a
    ``NOT SAFE`` banner naming the groups concerned."""
    blocks = []
    if not plan.safe:
        unsafe = [g.group for g in plan.groups if not g.safe]
        concerned = f" (groups: {', '.join(unsafe)})" if unsafe else ""
        blocks.append(f"NOT SAFE to fail over flow {plan.flow}{concerned}")
    blocks.append(
        f"flow {plan.flow}  safe: {'YES' if plan.safe else 'NO'}  "
        f"replication lag: {_count(plan.replication_lag_records)} records, "
        f"max {_millis(plan.replication_lag_ms)} ms  "
        f"source reachable: {_yes_no(plan.source_reachable)}")
    if plan.groups:
        blocks += [_group_readiness(group) for group in plan.groups]
    else:
        blocks.append("no groups")
    return "\n\n".join(blocks)


def format_failover_result(result: failover_pb2.FailoverResult, *,
                           at_ms: int | None = None) -> str:
    """`failover execute` and `failover to-time`: the offsets committed on the target,
    sorted by group, topic and partition; `at_ms` (to-time) is echoed in the header, in
    UTC. Warnings are not included (they go to stderr)."""
    at = f" for {_utc(at_ms)}" if at_ms is not None else ""
    committed = sorted(result.committed, key=lambda c: (c.group, c.target_topic, c.partition))
    if not committed:
        return f"flow {result.flow}: no offsets committed{at}"
    header = f"flow {result.flow}: offsets committed on the target{at}"
    table = render_table(
        ("GROUP", "TARGET TOPIC", "PARTITION", "OFFSET", "EXACT", "MAX DUPLICATES", "BASIS"),
        ((c.group, c.target_topic, str(c.partition), _count(c.offset), _yes_no(c.exact),
          _count(c.max_duplicates), _text(c.basis)) for c in committed),
        right=(2, 3, 5))
    return header + "\n\n" + table


# --------------------------------------------------------------------------- failback


def quote_argument(text: str) -> str:
    """`text` as one POSIX shell word: unchanged when it is safe as it is; quoted when it
    holds a character the shell would interpret (``>`` in ``primary->backup``, blanks)."""
    return shlex.quote(text)


def format_failback_plan(plan: failover_pb2.FailbackPlan) -> str:
    """`failback plan`: the reverse flow, the diverged partitions, the groups with offsets on
    the old primary, the notes and the command that scrapes (with the confirmation text).
    """
    reverse = plan.reverse_flow or NONE
    exists = "exists" if plan.reverse_exists else "does not exist yet"
    blocks = ["\n".join(_key_values((("flow", plan.flow),
                                      ("reverse flow", f"{reverse} ({exists})"))))]

    diverged = sorted(plan.diverged, key=lambda d: (d.topic, d.partition))
    if diverged:
        blocks.append("diverged partitions (written on the old primary, never mirrored):\n"
                      + render_table(
                          ("TOPIC", "PARTITION", "OLD PRIMARY END", "MIRRORED NEXT",
                           "DIVERGED RECORDS"),
                          ((d.topic, str(d.partition), _count(d.old_primary_end),
                            _count(d.mirrored_next), _count(d.diverged_records))
                           for d in diverged),
                          right=(1, 2, 3, 4)))
    else:
        blocks.append("diverged partitions: none")

    if plan.groups_on_old_primary:
        blocks.append("\n".join(["groups with offsets on the old primary:",
                                 *_bullets(plan.groups_on_old_primary)]))
    else:
        blocks.append("groups with offsets on the old primary: none")

    if plan.notes:
        blocks.append("\n".join(["notes:", *_bullets(plan.notes)]))

    if plan.confirm:
        blocks.append(f"to scrape, run: mirrorline admin failback execute "
                      f"{quote_argument(plan.flow)} --scrape --confirm "
                      f"{quote_argument(plan.confirm)}")
    return "\n\n".join(blocks)


def _names(items: Iterable[str]) -> str:
    return ", ".join(items) or "none"


def format_failback_result(result: failover_pb2.FailbackResult) -> str:
    """`failback execute`: the reverse flow (created now or not), what was scraped and which
    groups were deleted. Warnings are not included (they go to stderr)."""
    created = "created" if result.created else "already existed, not created"
    return "\n".join(_key_values((
        ("reverse flow", f"{result.reverse_flow or NONE} ({created})"),
        ("scraped topics", _names(result.scraped_topics)),
        ("deleted groups", _names(result.deleted_groups)),
    )))


# --------------------------------------------------------------------------- json


def to_dict(message: Message) -> dict[str, object]:
    """The proto3 JSON mapping of `message`, with proto field names and every field."""
    result: dict[str, object] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True)
    return result


def to_json(message: Message, *, compact: bool = False) -> str:
    """One JSON document; `compact` puts it on one line (as `status --watch` needs)."""
    return json.dumps(to_dict(message), indent=None if compact else 2)
