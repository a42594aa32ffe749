"""Every panel of every dashboard in `deploy/grafana/dashboards`, evaluated by a real
Prometheus (Debian's package, `make prometheus`) scraping a real `mirrorline run --spark`.

One deployment on clusters of its own (`alpha -> bravo`: the heartbeat service writes
fixed-name topics that must not reach the shared clusters) goes through three states, and
in each every query of every panel is sent to Prometheus's `/api/v1/query`:

* healthy: records mirrored, a consumer group checkpointed; every query answers with
  series (a panel reading "no data" while everything works is a broken panel), every
  metric a panel names is one some service exports, and the panels read what a healthy
  mirror is: nothing behind the source, no partition in error or unassigned, one leader,
  the Spark executor serving, audit verdicts present from 0;
* paused (`admin flows pause`, records keep arriving): lag in records and time grows,
  the paused flow is counted as paused;
* failing: the flow resumed, and a record its target refuses (above the target
  producer's `max.request.size`) stops one partition -- in error, behind, the flow in
  error, the other partition still copying; then the target cluster stopped -- config
  sync counts failed rounds, the target's heartbeats age.

The panels are read from the JSON, so a new panel is covered without touching this test;
its particular expectations (below, by title) are added where its meaning needs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from helpers import (
    Record,
    broker_kind,
    commit_offsets,
    consume_all,
    create_topic,
    produce,
    start_cluster,
    stop_cluster,
    wait_for,
)
from procs import admin_cli, free_port, mm2_config

from mirrorline.dev import prometheus
from mirrorline.dev.portcheck import is_free
from mirrorline.ports import GRPC_PORTS, METRICS_PORTS, run_ports

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
FLOW = "alpha->bravo"
TOPIC = "orders"
GROUP = "billing"
#: The largest record the target's producers take (max.request.size).
LIMIT = 20_000
SERVICES = ("controller", "replicator", "checkpointer", "heartbeat", "configsync",
            "spark-executor")

#: (labels, value) of each series a query returned.
Series = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Panel:
    dashboard: str
    title: str
    exprs: tuple[str, ...]


def panels() -> list[Panel]:
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        board = json.loads(path.read_text())
        for p in board["panels"]:
            exprs = tuple(t["expr"] for t in p.get("targets", []))
            assert exprs, f"{path.name}: panel {p['title']!r} has no query"
            found.append(Panel(path.name, p["title"], exprs))
    titles = [p.title for p in found]
    assert len(set(titles)) == len(titles), "panel titles must be unique across dashboards"
    return found


_NOT_NAMES = {"bool", "and", "or", "unless", "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, label lists and matchers,
    ranges and keywords left out)."""
    text = re.sub(r'"[^"]*"', "", expr)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    text = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", text)
    names = set()
    for found in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?", text):
        if found.group(2) is None and found.group(1).lower() not in _NOT_NAMES:
            names.add(found.group(1))
    return names


def test_metric_names_are_read_from_promql() -> None:
    assert metric_names('sum by (source, target) (max by (topic) (record_lag) > bool 0)') \
        == {"record_lag"}
    assert metric_names('sum(increase(a_total{state="error"}[5m])) or on() vector(0) * b') \
        == {"a_total", "b"}


class Prometheus:
    def __init__(self, port: int, session: aiohttp.ClientSession) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.session = session

    async def query(self, expr: str) -> Series:
        async with self.session.get(f"{self.url}/api/v1/query", params={"query": expr}) as r:
            body = await r.json()
        assert body["status"] == "success", f"{expr}: {body}"
        return [(s["metric"], float(s["value"][1])) for s in body["data"]["result"]]

    async def names(self) -> set[str]:
        async with self.session.get(f"{self.url}/api/v1/label/__name__/values") as r:
            return set((await r.json())["data"])

    async def ready(self) -> bool:
        with contextlib.suppress(aiohttp.ClientError):
            async with self.session.get(f"{self.url}/-/ready") as r:
                return r.status == 200
        return False

    async def targets_up(self, count: int) -> bool:
        up = await self.query("up == 1")
        return len(up) == count


def scrape_config(offset: int) -> str:
    """The compose file's scrape layout (one job, a `service` label per service), on
    loopback ports, scraped every second."""
    lines = ["global:", "  scrape_interval: 1s", "  evaluation_interval: 1s",
             "scrape_configs:", "  - job_name: mirrorline", "    static_configs:"]
    for service in SERVICES:
        lines += [f'      - targets: ["127.0.0.1:{METRICS_PORTS[service] + offset}"]',
                  f"        labels: {{service: {service}}}"]
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def running_prometheus(binary: Path, tmp: Path, offset: int
                             ) -> AsyncIterator[Prometheus]:
    (tmp / "prometheus.yml").write_text(scrape_config(offset))
    port = free_port()
    log = (tmp / "prometheus.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        str(binary), f"--config.file={tmp / 'prometheus.yml'}",
        f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn", stdout=log, stderr=log)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            prom = Prometheus(port, session)
            await wait_for(prom.ready, 30, "Prometheus did not become ready", interval=0.2)
            yield prom
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        log.close()


def total(series: Series) -> float:
    return sum(v for _, v in series)


def by(label: str, series: Series) -> dict[str, float]:
    return {s.get(label, ""): v for s, v in series}


#: What a panel (by title) must read in a state, beyond answering: a check on the series of
#: each of its queries, in order.
Check = Callable[[list[Series]], bool]
HEALTHY: Mapping[str, Check] = {
    "Partitions behind the source": lambda q: total(q[0]) == 0,
    "Record lag behind the source's log end (by remote topic)": lambda q: total(q[0]) == 0,
    "Records replicated / s (by flow)": lambda q: total(q[0]) > 0,
    "Partitions in error (by flow)": lambda q: total(q[0]) == 0,
    "Records lost before they could be copied (5 min)": lambda q: total(q[0]) == 0,
    "Flows by state": lambda q: by("state", q[0]).get("running") == 1,
    "Leader (1 leads)": lambda q: sorted(v for _, v in q[0]) == [1.0],
    "Live workers": lambda q: total(q[0]) == 2,  # replicator-0 and spark:0
    "Unassigned partitions (by flow)": lambda q: total(q[0]) == 0,
    # Rounds every second: current within a few of them.
    "Checkpoint age, ms (by flow)": lambda q: 0 <= total(q[0]) < 10_000,
    "Groups checkpointed": lambda q: total(q[0]) == 1,
    "Audit windows by verdict": lambda q: {"OK", "MISSING", "DUPLICATED", "CORRUPTED"}
    <= set(by("verdict", q[0])),
    "Serving (1 yes)": lambda q: total(q[0]) == 1,
    "Fenced (1 yes)": lambda q: total(q[0]) == 0,
    "Query problem (1 yes)": lambda q: total(q[0]) == 0,
}
PAUSED: Mapping[str, Check] = {
    # Both partitions of the topic; the flow's heartbeats and canaries stay behind too.
    "Partitions behind the source": lambda q: total(q[0]) >= 2,
    "Record lag behind the source's log end (by remote topic)": lambda q: total(q[0]) >= 40,
    "Time lag: age of the oldest record not copied, ms (by remote topic)":
        lambda q: total(q[0]) > 0,
    "Flows by state": lambda q: by("state", q[0]).get("paused") == 1,
    "Partitions in error (by flow)": lambda q: total(q[0]) == 0,
}
FAILING: Mapping[str, Check] = {
    # The target refuses one record of partition 1: that partition stops, in error.
    "Partitions in error (by flow)": lambda q: total(q[0]) == 1,
    "Flows by state": lambda q: by("state", q[0]).get("error") == 1,
    "Partitions behind the source": lambda q: total(q[0]) >= 1,
    "Record lag behind the source's log end (by remote topic)": lambda q: total(q[0]) >= 20,
    "Records replicated / s (by flow)": lambda q: total(q[0]) > 0,
}
#: Then the target cluster stopped (the deployment's home too: the controller stops
#: leading, so its panels are not judged here). Heartbeats come every second (the
#: default `emit.heartbeats.interval.seconds`).
TARGET_DOWN: Mapping[str, Check] = {
    "Failures (5 min)": lambda q: by("kind", q[0]).get("round", 0) > 0,
    "Heartbeat age per path": lambda q: min(
        (v for s, v in q[0] if s.get("cluster") == "bravo"), default=0) > 5000,
}


async def evaluate(prom: Prometheus, every: list[Panel]) -> dict[str, list[Series]]:
    return {p.title: [await prom.query(e) for e in p.exprs] for p in every}


async def reach(prom: Prometheus, every: list[Panel], expected: Mapping[str, Check],
                state: str, *, all_answer: bool, timeout: float = 60
                ) -> dict[str, list[Series]]:
    """Evaluate every panel until each reads as `expected` (and, `all_answer`, every query
    returns series); fail naming the panels that never did."""
    titles = {p.title for p in every}
    assert set(expected) <= titles, f"no panel titled {sorted(set(expected) - titles)}"
    last: dict[str, list[Series]] = {}

    def wrong() -> list[str]:
        bad = [f"{p.dashboard} / {p.title}: {e!r} returned no series"
               for p in every for e, s in zip(p.exprs, last[p.title], strict=True)
               if all_answer and not s]
        bad += [f"{title}: {last[title]}" for title, check in expected.items()
                if not all(last[title]) or not check(last[title])]
        return bad

    async def settled() -> bool:
        last.update(await evaluate(prom, every))
        return not wrong()

    try:
        await wait_for(settled, timeout, f"panels not {state}", interval=1.0)
    except AssertionError:
        raise AssertionError(f"{state}: panels wrong:\n  " + "\n  ".join(wrong())) from None
    return last


async def test_every_panel_reads_right_when_healthy_paused_and_failing(
        tmp_path: Path, unique: str) -> None:
    binary = prometheus.binary()
    if binary is None:
        if broker_kind() == "tansu":
            pytest.skip("no prometheus binary (make prometheus); the Tansu run may do without")
        raise AssertionError("no prometheus binary: run 'make prometheus' "
                             "(mirrorline dev prometheus install)")
    every = panels()
    alpha, bravo = await asyncio.gather(start_cluster("alpha", tmp_path / "alpha"),
                                        start_cluster("bravo", tmp_path / "bravo"))
    run: asyncio.subprocess.Process | None = None
    log = (tmp_path / "run.log").open("wb")
    try:
        await create_topic(alpha.bootstrap, TOPIC, 2)
        config = tmp_path / "mm2.properties"
        config.write_text(mm2_config(
            {"alpha": alpha, "bravo": bravo}, {FLOW: {"topics": TOPIC}},
            mirrorline_deployment=unique, refresh_topics_interval_seconds="1",
            refresh_groups_interval_seconds="1", emit_checkpoints_interval_seconds="1",
            canary_interval_ms="250", audit_window_ms="1000",
            bravo_producer_max_request_size=str(LIMIT)))
        offset = next(o for o in range(31000, 40000, 100)
                      if all(is_free(p) for p in run_ports(1, o, spark=True).values()))
        run = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "mirrorline", "run", "--config", str(config), "--workers",
            "1", "--port-offset", str(offset), "--lease-ms", "2000", "--spark",
            "--spark-master", "local[1]", stdout=log, stderr=log)
        controller = GRPC_PORTS["controller"] + offset
        async with running_prometheus(binary, tmp_path, offset) as prom:
            # Healthy: records mirrored, a group's offsets committed and checkpointed.
            await produce(alpha.bootstrap, TOPIC, [Record(b"%d" % i, partition=i % 2)
                                                   for i in range(40)])
            await consume_all(bravo.bootstrap, f"alpha.{TOPIC}", expected=40, timeout=90)
            await commit_offsets(alpha.bootstrap, GROUP, {(TOPIC, 0): 20, (TOPIC, 1): 20})
            await wait_for(lambda: prom.targets_up(len(SERVICES)), 90,
                           "not every service's /metrics was scraped", interval=0.5)
            await reach(prom, every, HEALTHY, "healthy", all_answer=True, timeout=90)
            exported = await prom.names()
            unknown = {f"{p.dashboard} / {p.title}: {name}" for p in every for e in p.exprs
                       for name in metric_names(e) if name not in exported}
            assert not unknown, f"panels read metrics nobody exports: {sorted(unknown)}"

            # Paused: the source's end moves on, nothing is copied.
            await _admin(controller, "flows", "pause", FLOW)
            await produce(alpha.bootstrap, TOPIC, [Record(b"p", partition=i % 2)
                                                   for i in range(40)])
            await reach(prom, every, PAUSED, "paused", all_answer=False)

            # Failing: resumed, and a record the target refuses (above the target
            # producer's max.request.size) stops its partition.
            await _admin(controller, "flows", "resume", FLOW)
            await produce(alpha.bootstrap, TOPIC, [Record(b"x" * (2 * LIMIT), partition=1)])
            await produce(alpha.bootstrap, TOPIC, [Record(b"f", partition=i % 2)
                                                   for i in range(40)])
            await reach(prom, every, FAILING, "failing", all_answer=False)
            await stop_cluster(bravo)
            await reach(prom, every, TARGET_DOWN, "failing (target down)", all_answer=False)
    finally:
        if run is not None and run.returncode is None:
            run.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(run.wait(), 60)
            except TimeoutError:
                run.kill()
                await run.wait()
        log.close()
        await asyncio.gather(stop_cluster(alpha), stop_cluster(bravo),
                             return_exceptions=True)


async def _admin(port: int, *args: str) -> None:
    code, _, err = await admin_cli(f"127.0.0.1:{port}", *args, timeout=30)
    assert code == 0, err
