"""`mirrorline admin status [--flow NAME] [--watch [--interval SECONDS]]`.

Without `--watch` one GetStatus call. With it, the WatchStatus stream is printed until
Ctrl-C: on a terminal each report redraws the table in place, otherwise tables follow each
other separated by a blank line, and with `--output json` each report is one JSON line
(`watch_frame`). The stream itself has no deadline, but its first report must come within
`--timeout`; a redirect to the leader happens only before that first report.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

import grpc

from mirrorline import grpcsecure
from mirrorline.cli.admin_args import parse_flow_name, positive_seconds
from mirrorline.cli.admin_calls import (
    AdminError,
    connection_of,
    fail,
    failure,
    follow,
    reached,
    redirect_of,
    unary,
    unreachable_message,
    usage_error,
)
from mirrorline.cli.admin_format import format_status, printable, to_json
from mirrorline.v1 import admin_pb2, admin_pb2_grpc

__all__ = ["CLEAR_SCREEN", "register", "watch_frame"]

#: ANSI: cursor home, clear the screen; `status --watch` redraws in place on a terminal.
CLEAR_SCREEN: Final = "\x1b[H\x1b[2J"


def watch_frame(report: admin_pb2.StatusReport, *, output: str, tty: bool,
                first: bool) -> str:
    """What `status --watch` writes for one report: a JSON line; a redrawn table on a
    terminal; successive tables separated by a blank line otherwise."""
    if output == "json":
        return to_json(report, compact=True) + "\n"
    table = printable(format_status(report)) + "\n"
    if tty:
        return CLEAR_SCREEN + table
    return table if first else "\n" + table


def _status(args: argparse.Namespace) -> int:
    if args.interval is not None and not args.watch:
        return usage_error(args, "--interval only applies with --watch")
    if args.watch:
        try:
            return _watch(args)
        except AdminError as error:
            return fail(error)
    return unary(args, lambda stub: stub.GetStatus,
                 admin_pb2.GetStatusRequest(flow=args.flow or ""), format_status)


def _watch(args: argparse.Namespace) -> int:
    """Print every report of WatchStatus until Ctrl-C (status 0) or a failure (AdminError).

    The stream has no deadline, but the first report must come within `--timeout`; a
    redirect to the leader happens only before the first report.
    """
    connection = connection_of(args)
    interval_ms = round(args.interval * 1000) if args.interval is not None else 0
    request = admin_pb2.WatchStatusRequest(flow=args.flow or "", interval_ms=interval_ms)
    tty = sys.stdout.isatty()
    address = connection.server
    for attempt in range(2):
        with grpcsecure.blocking_channel(address, connection.credentials) as channel:
            stream = admin_pb2_grpc.AdminStub(channel).WatchStatus(request)
            timed_out = threading.Event()

            def give_up(stream: Any = stream, timed_out: threading.Event = timed_out) -> None:
                timed_out.set()
                stream.cancel()

            timer = threading.Timer(connection.timeout, give_up)
            timer.daemon = True
            timer.start()
            first = True
            try:
                for report in stream:
                    if first:
                        timer.cancel()
                    sys.stdout.write(watch_frame(report, output=args.output, tty=tty,
                                                 first=first))
                    sys.stdout.flush()
                    first = False
                return 0
            except KeyboardInterrupt:
                stream.cancel()
                return 0
            except grpc.RpcError as exc:
                if first and timed_out.is_set():
                    if not reached(channel):
                        raise AdminError(unreachable_message(
                            address, f"no status report within {connection.timeout:g}s")
                        ) from None
                    raise AdminError(f"DEADLINE_EXCEEDED: no status report within "
                                     f"{connection.timeout:g}s") from None
                leader = follow(connection, address, redirect_of(exc, address)
                                if first and attempt == 0 else None)
                if leader is None:
                    raise failure(exc, address, channel) from None
                address = leader
            finally:
                timer.cancel()
    raise AssertionError("unreachable")  # pragma: no cover


def _min_interval(text: str) -> float:
    value = positive_seconds(text)
    if value < 0.2:
        raise argparse.ArgumentTypeError(f"{text!r}: the interval is at least 0.2 seconds")
    return value


def register(admin_sub: Any, leaf: Callable[..., argparse.ArgumentParser]) -> None:
    status = leaf(admin_sub, "status", _status, "replication status: flows and partitions")
    status.add_argument("--flow", type=parse_flow_name, metavar="NAME",
                        help="only this flow (SOURCE->TARGET)")
    status.add_argument("--watch", action="store_true",
                        help="keep showing new reports until Ctrl-C")
    status.add_argument("--interval", type=_min_interval, metavar="SECONDS",
                        help="seconds between reports with --watch (default: the "
                             "controller's, 2)")
