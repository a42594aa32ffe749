"""`python -m bench.idle`: what an idle deployment costs, per service, in CPU.

Starts two local clusters and `mirrorline run` on them with the README's minimal file (one
flow, `primary->backup`, and one empty 3-partition topic to mirror), produces nothing, lets
the deployment settle (`--warmup`, default 60 s: the heartbeat service's faust app starts
well after the process, and its start-up is not idle cost), then reads each service's CPU
time from /proc (user + system, every thread and child process of the service counted)
over `--seconds` (default 60) and prints it as a percentage of one core. The brokers are not
counted. A service above `--limit` (default 2 %) is marked; the exit status is 1 then.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from mirrorline.dev.local import BROKERS, start_local, stop_local
from mirrorline.dev.portcheck import is_free
from mirrorline.ports import run_ports

_TICKS = os.sysconf("SC_CLK_TCK")

#: What an idle heartbeat service still spends, printed under the table.
HEARTBEAT_NOTE = """\
heartbeat, idle by design: an MM2 heartbeat per cluster pair every second (pairs due
together share one request); a canary per source partition every canary.interval.ms,
timed as it is read back and reported to its faust table once per audit cadence (3 s
for minute windows, one event for all partitions); the audit of the canary topic's copy
(a report per side and a judging round per cadence; partitions with no window open are
not reported). Reports and rounds fall due together on a grid of the cadence and share
the faust app's requests; its consumer thread sends group heartbeats every 2 s and
commits every 10 s. Tails long-poll (the control log 2 s, others 500 ms; the audit's
fetches wait for the cadence's records), and the topology reads every 2 s."""


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid, as /proc shows them now."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(parent, []).append(int(entry))
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` (all its threads), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime


def _service_name(pid: int) -> str:
    """`controller`, `replicator-0`, ... from the service's command line."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return f"pid {pid}"
    words = [a.decode(errors="replace") for a in argv if a]
    for flag in ("--worker-id", "--instance-id", "--controller-id", "--executor-id"):
        if flag in words and words.index(flag) + 1 < len(words):
            name = words[words.index(flag) + 1]
            return "controller" if flag == "--controller-id" else name
    return " ".join(words[2:4])


def _services(run_pid: int) -> dict[str, list[int]]:
    """Each service `run` started, with every process below it (Spark's JVM, ...)."""
    children = _children()
    out: dict[str, list[int]] = {}
    for pid in children.get(run_pid, []):
        tree, todo = [], [pid]
        while todo:
            current = todo.pop()
            tree.append(current)
            todo += children.get(current, [])
        out[_service_name(pid)] = tree
    return out


def _free_offset(workers: int) -> int:
    for offset in range(1000, 20000, 100):
        if all(is_free(port) for port in run_ports(workers, offset).values()):
            return offset
    raise SystemExit("no free port range for the deployment")


async def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        await admin.close()


async def measure(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="mirrorline-bench-idle-"))
    primary = await start_local(args.broker, "primary", workdir)
    backup = await start_local(args.broker, "backup", workdir)
    run: asyncio.subprocess.Process | None = None
    try:
        await _create_topic(primary.bootstrap, "orders")
        config = workdir / "mm2.properties"
        config.write_text(f"clusters = primary, backup\n"
                          f"primary.bootstrap.servers = {primary.bootstrap}\n"
                          f"backup.bootstrap.servers = {backup.bootstrap}\n"
                          "primary->backup.enabled = true\n"
                          + "".join(f"{line}\n" for line in args.set))
        env = {k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_ENDPOINT"}
        log = await asyncio.to_thread(open, workdir / "run.log", "wb")
        try:
            run = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mirrorline", "run", "--config", str(config),
                "--workers", str(args.workers),
                "--port-offset", str(_free_offset(args.workers)),
                stdout=log, stderr=log, env=env)
        finally:
            log.close()
        print(f"{args.broker} brokers, `mirrorline run --workers {args.workers}`, nothing "
              f"produced; warm-up {args.warmup:g} s, measuring {args.seconds:g} s",
              flush=True)
        await asyncio.sleep(args.warmup)
        before = {name: sum(map(_cpu_seconds, pids))
                  for name, pids in _services(run.pid).items()}
        started = time.monotonic()
        await asyncio.sleep(args.seconds)
        elapsed = time.monotonic() - started
        services = _services(run.pid)
        if run.returncode is not None or set(services) != set(before):
            print(f"the deployment changed while measuring (see {workdir}/run.log)")
            return 1
        worst = 0.0
        print(f"{'service':<16} {'CPU % of a core':>16}")
        for name in sorted(services):
            share = (sum(map(_cpu_seconds, services[name])) - before[name]) / elapsed * 100
            worst = max(worst, share)
            mark = "  above the limit" if share > args.limit else ""
            print(f"{name:<16} {share:>16.1f}{mark}", flush=True)
        if any(name.startswith("heartbeat") for name in services):
            print(HEARTBEAT_NOTE, flush=True)
        return 1 if worst > args.limit else 0
    finally:
        if run is not None and run.returncode is None:
            run.send_signal(signal.SIGTERM)
            await run.wait()
        await stop_local(primary)
        await stop_local(backup)
        if args.keep:
            print(f"logs in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.idle", description=__doc__)
    parser.add_argument("--broker", choices=BROKERS, default="kafka")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--limit", type=float, default=2.0,
                        help="CPU %% of a core above which a service is marked")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="one more line of the properties file (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    raise SystemExit(asyncio.run(measure(parser.parse_args())))
