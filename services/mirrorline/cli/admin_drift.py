"""`mirrorline admin drift ...`: drift plans of topic configs, partitions and ACLs.

    mirrorline admin drift FLOW [--topic T]     the plan; changes nothing
    mirrorline admin drift apply FLOW           apply the plan now (also with sync.mode = plan)
    mirrorline admin drift history FLOW [--limit N]   changes applied and drift detected

The controller forwards these to the config-sync service (`drift.proto`). Rendering is
pure (`format_drift_plan`, `format_history`) and tested without a server.
"""

from __future__ import annotations

import argparse
import getpass
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from mirrorline.cli.admin_args import non_blank, parse_flow_name
from mirrorline.cli.admin_calls import unary, usage_error
from mirrorline.cli.admin_format import render_table
from mirrorline.v1 import drift_pb2

ACTIONS = ("apply", "history")


def _value(present: bool, value: str) -> str:
    return value if present else "(default)"


def _utc(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _acl(entry: drift_pb2.AclEntry) -> list[str]:
    return [entry.resource_type, entry.pattern.lower(), entry.name, entry.principal,
            entry.host, entry.operation, entry.permission]


def format_drift_plan(plan: drift_pb2.DriftPlan) -> str:
    """The plan as an operator reads it: a header, one table per topic, ACL tables."""
    lines = [f"flow: {plan.flow}",
             f"sync.mode: {plan.mode or 'apply'}",
             f"changes if applied: {plan.changes}"]
    if plan.error:
        lines.append(f"last sync round failed: {plan.error}")
    for feature, why in sorted(plan.unavailable.items()):
        lines.append(f"{feature}: {why}")
    if not plan.topics and not plan.acls_add and not plan.acls_remove:
        lines.append("no drift: the target matches the source")
        return "\n".join(lines)
    for topic in plan.topics:
        lines += ["", f"topic {topic.source_topic} -> {topic.remote_topic}"]
        if topic.problem:
            lines.append(f"  {topic.problem}")
        if topic.HasField("partitions"):
            p = topic.partitions
            why = f" ({p.reason})" if p.reason else ""
            lines.append(f"  partitions: source {p.source_partitions}, target "
                         f"{p.target_partitions}: {p.action}{why}")
        if topic.configs:
            rows = [[c.key, _value(c.source_present, c.source_value),
                     _value(c.target_present, c.target_value), c.action, c.reason or "-"]
                    for c in topic.configs]
            table = render_table(("KEY", "SOURCE", "TARGET", "ACTION", "WHY"), rows)
            lines += ["  " + line for line in table.splitlines()]
    headers = ("RESOURCE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")
    for title, entries in (("ACLs to add", plan.acls_add),
                           ("ACLs to remove (created by this flow, gone upstream)",
                            plan.acls_remove)):
        if entries:
            lines += ["", f"{title}:"]
            lines += ["  " + line for line in
                      render_table(headers, [_acl(e) for e in entries]).splitlines()]
    return "\n".join(lines)


def format_history(entries: Iterable[drift_pb2.HistoryEntry]) -> str:
    rows = [[_utc(e.at_ms), e.who, e.kind, e.subject, e.detail,
             "ok" if e.ok else f"FAILED: {e.error}"] for e in entries]
    if not rows:
        return "no changes applied yet"
    return render_table(("TIME", "WHO", "KIND", "SUBJECT", "CHANGE", "RESULT"), rows)


def format_apply(result: drift_pb2.ApplyDriftResult) -> str:
    failed = sum(1 for e in result.applied if not e.ok)
    head = (f"applied {len(result.applied) - failed} change(s) to {result.plan.flow}"
            + (f", {failed} refused" if failed else ""))
    if not result.applied:
        return f"nothing to apply: {result.plan.flow} has no drift the sync can fix"
    return head + "\n" + format_history(result.applied)


def _drift(args: argparse.Namespace) -> int:
    words: list[str] = args.words
    action = words[0] if len(words) == 2 and words[0] in ACTIONS else None
    if action is None and (len(words) != 1 or words[0] in ACTIONS):
        return usage_error(args, "expected FLOW, 'apply FLOW' or 'history FLOW'")
    try:
        flow = parse_flow_name(words[-1])
    except argparse.ArgumentTypeError as exc:
        return usage_error(args, str(exc))
    if args.limit and action != "history":
        return usage_error(args, "--limit only applies to drift history")
    if action is None:
        return unary(args, lambda stub: stub.GetDrift,
                     drift_pb2.DriftRequest(flow=flow, topic=args.topic or ""),
                     format_drift_plan)
    if args.topic:
        return usage_error(args, "--topic only applies to the plan (drift FLOW)")
    if action == "apply":
        return unary(args, lambda stub: stub.ApplyDrift,
                     drift_pb2.ApplyDriftRequest(flow=flow, requested_by=_who()),
                     format_apply)
    return unary(args, lambda stub: stub.GetDriftHistory,
                 drift_pb2.DriftHistoryRequest(flow=flow, limit=args.limit or 0),
                 lambda reply: format_history(reply.entries))


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return ""


def _limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def register(admin_sub: Any, common: argparse.ArgumentParser) -> None:
    parser: argparse.ArgumentParser = admin_sub.add_parser(
        "drift", parents=[common],
        usage="mirrorline admin drift [apply | history] FLOW [--topic TOPIC] [--limit N] "
              "[--server HOST:PORT] [--output {table,json}] [--timeout SECONDS]",
        help="topic configs, partitions and ACLs that differ between source and target",
        description="drift FLOW shows the plan (changes nothing); drift apply FLOW applies "
                    "it now; drift history FLOW lists the changes applied "
                    "and, with sync.mode = plan, each newly detected drift.")
    parser.add_argument("words", nargs="+", metavar="[apply|history] FLOW",
                        help="the flow, SOURCE->TARGET, optionally after apply or history")
    parser.add_argument("--topic", type=non_blank("topic"), metavar="TOPIC",
                        help="only this source topic (plan only)")
    parser.add_argument("--limit", type=_limit, metavar="N",
                        help="with history: only the newest N changes")
    parser.set_defaults(handler=_drift, command_parser=parser)
