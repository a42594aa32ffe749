"""`mirrorline admin offsets translate`, `failover plan|execute|to-time` and
`failback plan|execute`: moving consumer groups between the clusters of a flow.

The requests are built by `mirrorline.cli.admin_args` (a bad combination of options is a
usage error, status 2) and rendered by `mirrorline.cli.admin_format_failover`. A plan is a
report: it exits 0 whether the failover would be safe or not. `failover execute --mode
drain` waits for the drain, so its deadline is the larger of `--timeout` and the drain
timeout plus 30 seconds (`call_deadline`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from mirrorline.cli.admin_args import (
    DEFAULT_DRAIN_TIMEOUT,
    DRAIN_DEADLINE_MARGIN,
    FAILOVER_MODES,
    build_execute_failback_request,
    build_execute_failover_request,
    build_failover_to_time_request,
    build_plan_failback_request,
    build_plan_failover_request,
    build_translate_request,
    non_blank,
    parse_flow_name,
    parse_time,
    positive_seconds,
)
from mirrorline.cli.admin_calls import built, unary
from mirrorline.cli.admin_format_failover import (
    format_failback_plan,
    format_failback_result,
    format_failover_plan,
    format_failover_result,
    format_translate,
)

__all__ = ["register"]

#: `leaf(subparsers, name, handler, help)` and `group(name, help)` of `mirrorline.cli.admin`.
Leaf = Callable[..., argparse.ArgumentParser]
Group = Callable[[str, str], Any]


def _offsets_translate(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.TranslateOffsets,
                 built(args, build_translate_request), format_translate,
                 problem=lambda r: None if r.partitions else (
                     f"group {r.group!r} has no committed offsets on the topics flow "
                     f"{r.flow} mirrors (check the group name and that it has consumed "
                     "from a mirrored topic)"))


def _failover_plan(args: argparse.Namespace) -> int:
    """A report: status 0 whether the plan is safe or not."""
    return unary(args, lambda stub: stub.PlanFailover,
                 built(args, build_plan_failover_request), format_failover_plan)


def _failover_execute(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.ExecuteFailover,
                 built(args, build_execute_failover_request), format_failover_result,
                 warnings=lambda result: result.warnings)


def _failover_to_time(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.FailoverToTime,
                 built(args, build_failover_to_time_request),
                 lambda result: format_failover_result(result, at_ms=args.time),
                 warnings=lambda result: result.warnings)


def _failback_plan(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.PlanFailback,
                 built(args, build_plan_failback_request), format_failback_plan)


def _failback_execute(args: argparse.Namespace) -> int:
    return unary(args, lambda stub: stub.ExecuteFailback,
                 built(args, build_execute_failback_request), format_failback_result,
                 warnings=lambda result: result.warnings)


def register(group: Group, leaf: Leaf) -> None:
    """The `offsets`, `failover` and `failback` command groups."""
    def flow_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
        parser.add_argument("flow", type=parse_flow_name, metavar="FLOW", help=help_text)

    def groups_option(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--group", dest="groups", type=non_blank("group"), action="append",
                            required=True, metavar="GROUP",
                            help="consumer group (repeatable; at least one)")

    offsets_sub = group("offsets", "consumer group offsets across a flow")
    translate = leaf(offsets_sub, "translate", _offsets_translate,
                     "show where a group's source offsets are on the target")
    flow_argument(translate, "the flow, SOURCE->TARGET")
    translate.add_argument("--group", type=non_blank("group"), required=True, metavar="GROUP",
                           help="consumer group")

    failover_sub = group("failover", "move consumer groups from a flow's source to its "
                                     "target")
    plan = leaf(failover_sub, "plan", _failover_plan,
                "report whether the groups can fail over now, and at what cost "
                "(changes nothing)")
    flow_argument(plan, "the flow to fail over, SOURCE->TARGET")
    groups_option(plan)

    execute = leaf(failover_sub, "execute", _failover_execute,
                   "commit the groups' translated offsets on the target")
    flow_argument(execute, "the flow to fail over, SOURCE->TARGET")
    groups_option(execute)
    execute.add_argument(
        "--mode", choices=tuple(FAILOVER_MODES), required=True,
        help="drain: planned failover, wait until every record is mirrored, then commit "
             "exact offsets; now: unplanned failover, commit what can be translated at "
             "once (records not mirrored yet are not on the target; some may be repeated)")
    execute.add_argument(
        "--drain-timeout", type=positive_seconds, metavar="SECONDS",
        help=f"with --mode drain: how long the server waits for the drain (default: "
             f"{DEFAULT_DRAIN_TIMEOUT:g}); the call's deadline is at least this plus "
             f"{DRAIN_DEADLINE_MARGIN:g}")

    to_time = leaf(failover_sub, "to-time", _failover_to_time,
                   "commit offsets on the target at the first records at or after a time")
    flow_argument(to_time, "the flow to fail over, SOURCE->TARGET")
    groups_option(to_time)
    to_time.add_argument(
        "--time", type=parse_time, required=True, metavar="TIME",
        help="epoch milliseconds, or ISO 8601 with a zone (2026-11-21T04:03:00Z, "
             "'2026-11-21 04:03:00+02:00')")

    failback_sub = group("failback", "mirror back to the old primary after a failover")
    back_plan = leaf(failback_sub, "plan", _failback_plan,
                     "what a failback would do: reverse flow, diverged records, groups "
                     "(changes nothing)")
    flow_argument(back_plan, "the flow that was failed over from, e.g. primary->backup")

    back_execute = leaf(failback_sub, "execute", _failback_execute,
                        "create the reverse flow, scraping the old primary first if asked")
    flow_argument(back_execute, "the flow that was failed over from, e.g. primary->backup")
    back_execute.add_argument(
        "--scrape", action="store_true",
        help="first delete the old primary's data and committed offsets of the topics "
             "(needs --confirm)")
    back_execute.add_argument(
        "--confirm", type=non_blank("confirmation text"), metavar="TEXT",
        help="with --scrape: the text printed by `failback plan`")
    back_execute.add_argument(
        "--topic", dest="topics", type=non_blank("topic"), action="append", metavar="TOPIC",
        help="with --scrape: scrape only this topic (repeatable; default: every topic of "
             "the flow)")
