"""Arguments of `mirrorline admin`: argument types, and the requests they build.

Pure: nothing here talks to a server. `mirrorline.cli.admin` registers the commands and
calls the controller with what these functions build; a RequestError is an argument
error (exit status 2).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

from mirrorline.ports import GRPC_PORTS
from mirrorline.v1 import admin_pb2, failover_pb2, flows_pb2

__all__ = [
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_SERVER",
    "DRAIN_DEADLINE_MARGIN",
    "FAILOVER_MODES",
    "POLICY_CLASSES",
    "SERVER_ENV",
    "RequestError",
    "build_create_request",
    "build_execute_failback_request",
    "build_execute_failover_request",
    "build_failover_to_time_request",
    "build_plan_failback_request",
    "build_plan_failover_request",
    "build_translate_request",
    "build_update_request",
    "call_deadline",
    "flow_properties",
    "parse_flow_name",
    "parse_property",
    "parse_time",
    "policy_class",
    "resolve_server",
]

DEFAULT_SERVER: Final = f"127.0.0.1:{GRPC_PORTS['controller']}"
SERVER_ENV: Final = "MIRRORLINE_SERVER"

_MIRROR_PACKAGE: Final = "org.apache.kafka.connect.mirror."
#: `--policy` short names -> the `replication.policy.class` value sent (any other value is
#: sent as given; the controller decides whether it knows it).
POLICY_CLASSES: Final[Mapping[str, str]] = {
    "default": _MIRROR_PACKAGE + "DefaultReplicationPolicy",
    "identity": _MIRROR_PACKAGE + "IdentityReplicationPolicy",
}

#: `--mode` of `failover execute` -> FailoverMode. There is no default: a drain waits for
#: every record and commits exact offsets, `now` commits what can be translated at once.
FAILOVER_MODES: Final[Mapping[str, failover_pb2.FailoverMode.ValueType]] = {
    "drain": failover_pb2.FAILOVER_MODE_DRAIN,
    "now": failover_pb2.FAILOVER_MODE_NOW,
}
#: The drain timeout the server applies when the request leaves it at 0 (seconds).
DEFAULT_DRAIN_TIMEOUT: Final = 60.0
#: What the deadline of a drain adds to the drain timeout (seconds).
DRAIN_DEADLINE_MARGIN: Final = 30.0
_INT32_MAX: Final = 2**31 - 1


class RequestError(ValueError):
    """Arguments that parse one by one but cannot make a request together (exit status 2)."""


# --------------------------------------------------------------------------- argument types


def parse_flow_name(text: str) -> str:
    """`SOURCE->TARGET` (blanks around the aliases are dropped) -> ``source->target``."""
    source, sep, target = text.partition("->")
    source, target = source.strip(), target.strip()
    if not sep or not source or not target or "->" in target:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a flow name: expected SOURCE->TARGET, e.g. primary->backup")
    if source == target:
        raise argparse.ArgumentTypeError(f"{text!r}: the source and target must differ")
    return f"{source}->{target}"


def alias_arg(text: str) -> str:
    alias = text.strip()
    if not alias or "->" in alias:
        raise argparse.ArgumentTypeError(f"{text!r} is not a cluster alias")
    return alias


def parse_property(text: str) -> tuple[str, str]:
    """`KEY=VALUE` -> (key, value): split at the first ``=``; the value may hold more ``=``
    and may be empty; blanks around the key are dropped, the value is kept as given."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def property_key(text: str) -> str:
    key = text.strip()
    if not key or "=" in key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a property name")
    return key


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number of seconds")
    return value


def non_blank(what: str) -> Callable[[str], str]:
    """A group, topic or confirmation text: kept as given, but not empty or blank."""
    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"the {what} is empty")
        return text
    return parse


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_TIME_EXAMPLES: Final = "e.g. 2026-11-21T04:03:00Z, 2026-11-21 04:03:00+02:00 or 1795233780000"


def parse_time(text: str) -> int:
    """`--time`: epoch milliseconds, or ISO 8601 with a zone -> epoch milliseconds.

    ``1795233780000``, ``2026-11-21T04:03:00Z``, ``2026-11-21 04:03:00.250+02:00``. A time
    without a zone is refused (whose local time would it be?), and so are times before 1970,
    numbers that look like epoch seconds (10 or 11 digits: as milliseconds they would be a
    day in 1970-1973) and numbers past the year 5000 (micro- or nanoseconds).
    """
    value = text.strip()
    if value.isdigit():  # ASCII digits only: isdigit() also accepts e.g. superscripts
        if not value.isascii():
            raise argparse.ArgumentTypeError(f"{text!r} is not a time ({_TIME_EXAMPLES})")
        ms = int(value)
        if 10**9 <= ms < 10**11:
            raise argparse.ArgumentTypeError(
                f"{text!r} looks like epoch seconds: give epoch milliseconds "
                f"({value}000) or an ISO 8601 time")
        if ms >= 10**14:
            raise argparse.ArgumentTypeError(
                f"{text!r} is past the year 5000: give epoch milliseconds, not micro- or "
                f"nanoseconds")
        return ms
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: give epoch milliseconds or ISO 8601 with a zone "
            f"({_TIME_EXAMPLES})") from None
    if moment.tzinfo is None or moment.utcoffset() is None:
        base = value if ":" in value else moment.isoformat()  # a date alone takes no zone
        raise argparse.ArgumentTypeError(
            f"{text!r} has no time zone: add one, e.g. {base}Z for UTC or {base}+02:00")
    ms = (moment - _EPOCH) // timedelta(milliseconds=1)
    if ms < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is before 1970")
    return ms


def server_address(text: str) -> str:
    address = text.strip()
    if not address:
        raise argparse.ArgumentTypeError("the server address is empty")
    return address


def resolve_server(option: str | None, environ: Mapping[str, str]) -> str:
    """`--server`, else `$MIRRORLINE_SERVER` (when not blank), else 127.0.0.1:7100."""
    if option:
        return option
    return environ.get(SERVER_ENV, "").strip() or DEFAULT_SERVER


def policy_class(value: str) -> str:
    """`--policy default|identity|<class name>` -> the `replication.policy.class` value."""
    return POLICY_CLASSES.get(value.strip().lower(), value.strip())


# --------------------------------------------------------------------------- requests


def flow_properties(args: argparse.Namespace) -> dict[str, str]:
    """The MM2 properties set by `--set`, `--topics`, `--topics-exclude` and `--policy`.

    A property given twice with different values is a RequestError (no silent "last wins").
    """
    properties: dict[str, str] = {}

    def put(key: str, value: str) -> None:
        if key in properties and properties[key] != value:
            raise RequestError(f"property {key!r} is given twice, as {properties[key]!r} "
                               f"and as {value!r}")
        properties[key] = value

    for key, value in getattr(args, "set", None) or ():
        put(key, value)
    if getattr(args, "topics", None) is not None:
        put("topics", args.topics)
    if getattr(args, "topics_exclude", None) is not None:
        put("topics.exclude", args.topics_exclude)
    if getattr(args, "policy", None) is not None:
        put("replication.policy.class", policy_class(args.policy))
    return properties


def build_create_request(args: argparse.Namespace) -> admin_pb2.CreateFlowRequest:
    """`flows create` arguments -> CreateFlowRequest (RequestError for a bad combination)."""
    source_opt, target_opt = getattr(args, "source", None), getattr(args, "target", None)
    if args.flow is not None:
        if source_opt is not None or target_opt is not None:
            raise RequestError("give either SOURCE->TARGET or --source/--target, not both")
        source, _, target = args.flow.partition("->")
    elif source_opt is not None and target_opt is not None:
        source, target = source_opt, target_opt
    else:
        raise RequestError("which flow? give SOURCE->TARGET, or both --source and --target")
    if source == target:
        raise RequestError(f"the source and target must differ (both are {source!r})")
    spec = flows_pb2.FlowSpec(source=source, target=target, properties=flow_properties(args))
    return admin_pb2.CreateFlowRequest(spec=spec)


def build_update_request(args: argparse.Namespace) -> admin_pb2.UpdateFlowRequest:
    """`flows update` arguments -> UpdateFlowRequest (RequestError when there is nothing to
    change or a property is both set and unset)."""
    properties = flow_properties(args)
    unset = list(dict.fromkeys(getattr(args, "unset", None) or ()))
    both = [key for key in unset if key in properties]
    if both:
        raise RequestError(f"property {both[0]!r} is both set and unset")
    if not properties and not unset:
        raise RequestError("nothing to change: give --topics, --topics-exclude, --policy, "
                           "--set or --unset")
    return admin_pb2.UpdateFlowRequest(name=args.name, set=properties, unset=unset)


def _unique(values: Iterable[str] | None) -> list[str]:
    """`values` without repeats, in the order given."""
    return list(dict.fromkeys(values or ()))


def build_translate_request(args: argparse.Namespace) -> failover_pb2.TranslateOffsetsRequest:
    """`offsets translate FLOW --group GROUP` -> TranslateOffsetsRequest."""
    return failover_pb2.TranslateOffsetsRequest(flow=args.flow, group=args.group)


def build_plan_failover_request(args: argparse.Namespace) -> failover_pb2.PlanFailoverRequest:
    """`failover plan FLOW --group G...` -> PlanFailoverRequest (groups once each, in the
    order given)."""
    return failover_pb2.PlanFailoverRequest(flow=args.flow, groups=_unique(args.groups))


def build_execute_failover_request(
        args: argparse.Namespace) -> failover_pb2.ExecuteFailoverRequest:
    """`failover execute FLOW --group G... --mode drain|now [--drain-timeout SECONDS]` ->
    ExecuteFailoverRequest; without `--drain-timeout` the server's default (60 s) applies.

    RequestError: `--drain-timeout` with `--mode now`, or longer than the field holds.
    """
    drain_timeout_ms = 0
    if args.drain_timeout is not None:
        if args.mode != "drain":
            raise RequestError("--drain-timeout only applies with --mode drain")
        drain_timeout_ms = max(1, round(args.drain_timeout * 1000))
        if drain_timeout_ms > _INT32_MAX:
            raise RequestError(f"--drain-timeout is at most {_INT32_MAX // 1000} seconds")
    return failover_pb2.ExecuteFailoverRequest(
        flow=args.flow, groups=_unique(args.groups), mode=FAILOVER_MODES[args.mode],
        drain_timeout_ms=drain_timeout_ms)


def build_failover_to_time_request(
        args: argparse.Namespace) -> failover_pb2.FailoverToTimeRequest:
    """`failover to-time FLOW --group G... --time TIME` -> FailoverToTimeRequest (`--time`
    is already epoch milliseconds: `parse_time` is its type)."""
    return failover_pb2.FailoverToTimeRequest(flow=args.flow, groups=_unique(args.groups),
                                              timestamp_ms=args.time)


def build_plan_failback_request(args: argparse.Namespace) -> failover_pb2.PlanFailbackRequest:
    """`failback plan FLOW` -> PlanFailbackRequest."""
    return failover_pb2.PlanFailbackRequest(flow=args.flow)


def build_execute_failback_request(
        args: argparse.Namespace) -> failover_pb2.ExecuteFailbackRequest:
    """`failback execute FLOW [--scrape --confirm TEXT [--topic T...]]` ->
    ExecuteFailbackRequest.

    RequestError: `--scrape` without `--confirm` (the text comes from `failback plan`), or
    `--confirm`/`--topic` without `--scrape` (both only qualify a scrape).
    """
    topics = _unique(args.topics)
    if args.scrape:
        if args.confirm is None:
            raise RequestError(
                f"--scrape needs --confirm TEXT: `mirrorline admin failback plan "
                f"{args.flow}` prints the text")
    elif args.confirm is not None:
        raise RequestError("--confirm only applies with --scrape")
    elif topics:
        raise RequestError("--topic only applies with --scrape (it names the topics whose "
                           "data is deleted on the old primary)")
    return failover_pb2.ExecuteFailbackRequest(flow=args.flow, scrape=args.scrape,
                                               topics=topics, confirm=args.confirm or "")


def call_deadline(args: argparse.Namespace) -> float:
    """The deadline of the call in seconds: `--timeout`; for `failover execute --mode
    drain`, at least the drain timeout (`--drain-timeout`, else the server's 60 s) plus 30 s,
    so that the client does not give up on a drain the server still runs."""
    if getattr(args, "mode", None) != "drain":
        return float(args.timeout)
    drain = args.drain_timeout if args.drain_timeout is not None else DEFAULT_DRAIN_TIMEOUT
    return max(float(args.timeout), drain + DRAIN_DEADLINE_MARGIN)


