"""`mirrorline dev ...`: local developer tooling (brokers now; more dev commands plug in here).

`mirrorline dev brokers up|down|status` manages detached local clusters -- the embedded Tansu
broker (pip only, the default) or Apache Kafka (`--broker kafka`, needs Java and
`mirrorline dev kafka install`) -- and records them in `<state dir>/brokers.json`, so that
later commands (and other terminals) find them.
Other `dev` subcommands live in their own modules, listed in `_DEV_COMMAND_MODULES`; each
exposes `register(dev_subparsers)` exactly like the top-level command modules do.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from mirrorline.cli import register_modules
from mirrorline.dev.brokers import (
    DEFAULT_STORAGE,
    BrokerError,
    LocalBroker,
    default_port,
    default_state_dir,
    is_broker_process,
    load_state,
    probe,
    save_state,
    start_broker,
    stop_broker,
)
from mirrorline.dev.kafka import KAFKA_VERSION, is_kafka_process, start_kafka
from mirrorline.dev.portcheck import is_free

#: Modules adding further `dev` subcommands through `register(dev_subparsers)`; a module that
#: does not exist (yet) is skipped, as in `mirrorline.cli._COMMAND_MODULES`.
_DEV_COMMAND_MODULES = ("mirrorline.cli.demo", "mirrorline.cli.records", "mirrorline.cli.kafka",
                        "mirrorline.cli.prometheus")

DEFAULT_ALIASES = ("primary", "backup")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dev = subparsers.add_parser("dev", help="local developer tooling (brokers, demo)")
    dev.set_defaults(handler=_help_for(dev))
    dev_sub = dev.add_subparsers(dest="dev_command", metavar="SUBCOMMAND")

    brokers = dev_sub.add_parser("brokers", help="start, stop and inspect local clusters")
    brokers.set_defaults(handler=_help_for(brokers))
    brokers_sub = brokers.add_subparsers(dest="brokers_command", metavar="ACTION")

    up = brokers_sub.add_parser(
        "up", help="start detached local brokers (idempotent)",
        description="Start one detached cluster per alias: the embedded Tansu broker "
                    f"(default) or Apache Kafka {KAFKA_VERSION} (--broker kafka). Default "
                    "ports: first alias 19092, then 29092, 39092, ...; ALIAS=PORT picks the "
                    "port (of the first node).",
    )
    up.add_argument("--broker", choices=("tansu", "kafka"), default="tansu",
                    help="tansu: embedded, pip only (default); kafka: Apache Kafka KRaft "
                         "(needs Java 17+ and 'mirrorline dev kafka install')")
    up.add_argument("--nodes", type=int, default=1,
                    help="Apache Kafka nodes per cluster (default 1; 3 for leader changes)")
    up.add_argument("aliases", nargs="*", metavar="ALIAS[=PORT]",
                    help=f"clusters to start (default: {' '.join(DEFAULT_ALIASES)})")
    up.add_argument("--storage", default=DEFAULT_STORAGE,
                    help=f"Tansu storage engine URL (default: {DEFAULT_STORAGE})")
    up.add_argument("--timeout", type=float, default=None,
                    help="seconds to wait for each cluster to answer (default: 15 for "
                         "Tansu, 90 for Apache Kafka)")
    up.set_defaults(handler=_up)

    down = brokers_sub.add_parser("down", help="stop recorded brokers")
    down.add_argument("aliases", nargs="*", metavar="ALIAS",
                      help="brokers to stop (default: every recorded one)")
    down.set_defaults(handler=_down)

    status = brokers_sub.add_parser(
        "status", help="show recorded brokers (exit 1 if any is not answering)")
    status.set_defaults(handler=_status)

    register_modules(_DEV_COMMAND_MODULES, dev_sub)


def _help_for(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """A handler printing `parser`'s help: a command group alone is a usage error (status 2)."""

    def show_help(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return 2
    return show_help


def _fail(command: str, message: str) -> int:
    first_line = message.strip().splitlines()[0] if message.strip() else "failed"
    print(f"mirrorline: dev brokers {command}: {first_line}", file=sys.stderr)
    return 1


# --------------------------------------------------------------------------- up


def _parse_requests(specs: Sequence[str]) -> list[tuple[str, int | None]]:
    requests: list[tuple[str, int | None]] = []
    for spec in specs or DEFAULT_ALIASES:
        alias, sep, port_text = spec.partition("=")
        port: int | None = None
        if sep:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise BrokerError(f"{spec!r}: PORT must be a number between 1 and 65535")
            port = int(port_text)
        if not alias:
            raise BrokerError(f"{spec!r}: missing alias")
        if any(alias == seen for seen, _ in requests):
            raise BrokerError(f"alias {alias!r} given twice")
        requests.append((alias, port))
    return requests


def _plan_ports(
    requests: list[tuple[str, int | None]], state: dict[str, LocalBroker]
) -> tuple[list[LocalBroker], list[tuple[str, int]]]:
    """Split requests into already-running brokers and (alias, port) pairs to start."""
    running = {a: b for a, b in state.items() if is_running(b)}
    claimed = {b.port for b in running.values()}
    claimed.update(port for alias, port in requests if port is not None and alias not in running)
    already: list[LocalBroker] = []
    to_start: list[tuple[str, int]] = []
    for index, (alias, port) in enumerate(requests):
        slot = index  # the n-th alias defaults to the n-th default port, else the next free one
        if alias in running:
            already.append(running[alias])
            continue
        if port is None and alias in state and state[alias].port not in claimed:
            port = state[alias].port  # restart where clients already look for it
        while port is None:
            candidate = default_port(slot)
            slot += 1
            if candidate in claimed:
                continue
            if not is_free(candidate):
                raise BrokerError(
                    f"default port {candidate} for {alias!r} is in use by another process;"
                    f" choose one with {alias}=PORT"
                )
            port = candidate
        claimed.add(port)
        to_start.append((alias, port))
    return already, to_start


def is_running(broker: LocalBroker) -> bool:
    """True when every recorded process of `broker` is alive and is the one we started."""
    if broker.kind == "kafka":
        return all(is_kafka_process(pid, broker.storage) for pid in broker.all_pids)
    return is_broker_process(broker.pid, broker.alias, broker.port)


async def _start_one(args: argparse.Namespace, alias: str, port: int,
                     state_dir: Path) -> LocalBroker:
    if args.broker == "kafka":
        cluster = await start_kafka(alias, directory=state_dir / "kafka" / alias,
                                    nodes=args.nodes, port=port, detach=True,
                                    ready_timeout=args.timeout or 90.0)
        print(f"{alias}: Apache Kafka {KAFKA_VERSION}, {len(cluster.nodes)} node(s), "
              f"answering after {cluster.started_in:.1f}s", flush=True)
        return cluster.record()
    return await start_broker(alias, port=port, storage=args.storage,
                              log_dir=state_dir / "logs", detach=True,
                              ready_timeout=args.timeout or 15.0)


async def _start_all(args: argparse.Namespace, to_start: list[tuple[str, int]],
                     state_dir: Path) -> list[LocalBroker | BaseException]:
    return await asyncio.gather(
        *(_start_one(args, alias, port, state_dir) for alias, port in to_start),
        return_exceptions=True,
    )


def _up(args: argparse.Namespace) -> int:
    state_dir = default_state_dir()
    if args.nodes < 1 or (args.nodes > 1 and args.broker != "kafka"):
        return _fail("up", "--nodes needs --broker kafka and at least 1")
    try:
        requests = _parse_requests(args.aliases)
        state = load_state(state_dir)
        already, to_start = _plan_ports(requests, state)
    except BrokerError as exc:
        return _fail("up", str(exc))
    results = asyncio.run(_start_all(args, to_start, state_dir))
    started: list[LocalBroker] = []
    errors: list[str] = []
    for result in results:
        if isinstance(result, LocalBroker):
            started.append(result)
            state[result.alias] = result
        elif isinstance(result, Exception):
            errors.append(str(result))
        else:
            raise result
    save_state(state_dir, state)
    rows = [(b, "already running") for b in already] + [(b, "started") for b in started]
    if rows:
        _print_table(
            ("ALIAS", "BROKER", "BOOTSTRAP", "PID", "STATE", "LOG"),
            [(b.alias, b.kind, b.bootstrap, str(b.pid), note, b.log_path) for b, note in rows],
        )
    if errors:
        for message in errors[1:]:
            _fail("up", message)
        return _fail("up", errors[0])
    print(f"recorded in {state_dir}; stop with: mirrorline dev brokers down")
    return 0


# --------------------------------------------------------------------------- down


def _down(args: argparse.Namespace) -> int:
    state_dir = default_state_dir()
    try:
        state = load_state(state_dir)
    except BrokerError as exc:
        return _fail("down", str(exc))
    aliases: list[str] = list(args.aliases) or sorted(state)
    unknown = [alias for alias in aliases if alias not in state]
    for alias in aliases:
        broker = state.get(alias)
        if broker is None:
            continue
        if is_running(broker):
            for pid in broker.all_pids:
                stop_broker(pid)
            pids = ", ".join(map(str, broker.all_pids))
            print(f"stopped {alias} (pid {pids}, {broker.bootstrap})")
        else:
            print(f"{alias} was not running")
        del state[alias]
    save_state(state_dir, state)
    if not aliases:
        print(f"no brokers recorded in {state_dir}")
    if unknown:
        return _fail("down", f"no recorded broker named {', '.join(map(repr, unknown))}")
    return 0


# --------------------------------------------------------------------------- status


async def _probe_all(brokers: list[LocalBroker]) -> list[str | None]:
    return list(await asyncio.gather(*(probe(b.bootstrap) for b in brokers)))


def _status(args: argparse.Namespace) -> int:
    state_dir = default_state_dir()
    try:
        state = load_state(state_dir)
    except BrokerError as exc:
        return _fail("status", str(exc))
    if not state:
        print(f"no brokers recorded in {state_dir}")
        return 0
    brokers = [state[alias] for alias in sorted(state)]
    running = [is_running(b) for b in brokers]
    answers = asyncio.run(_probe_all(brokers))
    rows: list[tuple[str, ...]] = []
    unhealthy: list[str] = []
    for broker, alive, cluster_id in zip(brokers, running, answers, strict=True):
        if cluster_id is None:
            kafka = "no"
        elif cluster_id == broker.expected_cluster_id:
            kafka = "yes"
        else:
            kafka = f"wrong cluster {cluster_id!r}"
        if not alive or kafka != "yes":
            unhealthy.append(broker.alias)
        rows.append((broker.alias, broker.kind, broker.bootstrap, str(broker.pid),
                     "yes" if alive else "no", kafka))
    _print_table(("ALIAS", "BROKER", "BOOTSTRAP", "PID", "RUNNING", "ANSWERING"), rows)
    if unhealthy:
        return _fail("status", f"not running or not answering: {', '.join(unhealthy)}")
    return 0


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
              .rstrip())
