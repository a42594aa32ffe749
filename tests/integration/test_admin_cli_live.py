"""`mirrorline admin` against a real controller (a leader and a standby) and a worker."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
from pathlib import Path

import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import admin_cli, admin_cli_json, deployment, deployment_config, free_port

from mirrorline.dev.brokers import LocalBroker

pytestmark = pytest.mark.integration




async def test_the_cli_drives_a_real_deployment(primary: LocalBroker, backup: LocalBroker,
                                               unique: str, tmp_path: Path) -> None:
    tag = secrets.token_hex(3)
    a, b = f"a{tag}", f"b{tag}"
    topic = f"{unique}-cli"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, [Record(f"{i}".encode(), partition=i % 2)
                                             for i in range(20)])
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        await d.leader()
        await d.controller("c2")
        await d.worker("w1")
        leader = f"127.0.0.1:{d.controllers['c1'].grpc_port}"
        standby = f"127.0.0.1:{d.controllers['c2'].grpc_port}"
        flow = f"{a}->{b}"

        created = await admin_cli_json(standby, "flows", "create", flow, "--topics", topic,
                                   "--set", "refresh.topics.interval.seconds=1")
        assert created["name"] == flow  # through the standby: the redirect was followed
        assert created["spec"]["properties"]["topics"] == topic
        await consume_all(backup.bootstrap, f"{a}.{topic}", expected=20, timeout=40)

        listed = await admin_cli_json(leader, "flows", "list")
        assert [f["name"] for f in listed["flows"]] == [flow]
        updated = await admin_cli_json(leader, "flows", "update", flow, "--set",
                                   "offset.lag.max=7")
        assert updated["spec"]["properties"]["offset.lag.max"] == "7"
        paused = await admin_cli_json(leader, "flows", "pause", flow)
        assert paused["paused"] is True
        assert (await admin_cli_json(leader, "flows", "get", flow))["paused"] is True
        await admin_cli_json(leader, "flows", "resume", flow)

        async def running() -> bool:
            report = await admin_cli_json(leader, "status")
            return report["flows"][0]["state"] == "FLOW_STATE_RUNNING"
        await wait_for(running, 30, "the flow did not run again", interval=0.5)

        code, table, _ = await admin_cli(leader, "status")
        assert code == 0 and flow in table and topic in table and "w1" in table
        workers = await admin_cli_json(leader, "workers")
        assert [(w["worker_id"], w["alive"], len(w["partitions"]))
                for w in workers["workers"]] == [("w1", True, 2)]
        code, table, _ = await admin_cli(leader, "workers")
        assert code == 0 and "w1" in table

        # Live status: successive JSON documents, then Ctrl-C ends it cleanly. Ctrl-C as a
        # terminal delivers it: SIGINT at its default disposition in the child, as in an
        # interactive shell (a suite started in the background by a non-interactive shell
        # would otherwise hand down SIGINT ignored, and Python then never raises
        # KeyboardInterrupt).
        # Set in the child itself, not with preexec_fn: that makes Python fork() this
        # process, whose gRPC threads then leave the child broken before its exec now and
        # then ("skipping fork() handlers"; no output at all).
        watch = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _SIGINT_AS_ON_A_TERMINAL, "admin", "--server", leader,
            "--output", "json", "status", "--watch", "--interval", "0.3",
            stdout=asyncio.subprocess.PIPE)
        assert watch.stdout is not None
        lines = [await asyncio.wait_for(watch.stdout.readline(), 20) for _ in range(2)]
        assert all(json.loads(line)["flows"][0]["flow"] == flow for line in lines)
        watch.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(watch.wait(), 20) == 0

        # Bad input: exit status 1, the server's code and message on stderr.
        code, _, err = await admin_cli(leader, "flows", "create", f"{b}->{a}", "--topics", "(")
        assert code == 1
        assert err.startswith("mirrorline: INVALID_ARGUMENT: spec.properties.topics")
        code, _, err = await admin_cli(leader, "flows", "get", f"{b}->{a}")
        assert (code, err.strip()) == (1, f"mirrorline: NOT_FOUND: flow {b}->{a} does not exist")
        code, _, err = await admin_cli(f"127.0.0.1:{free_port()}", "flows", "list",
                                       "--timeout", "2")
        assert code == 1 and "cannot reach the controller" in err

        # Import applies a file deliberately.
        file = tmp_path / "more.properties"
        file.write_text(d.path.read_text() + f"{b}->{a}.enabled = true\n"
                        f"{b}->{a}.topics = {unique}-back\n")
        imported = await admin_cli_json(leader, "flows", "import", str(file))
        assert imported["created"] == [f"{b}->{a}"]
        deleted = await admin_cli_json(leader, "flows", "delete", f"{b}->{a}")
        assert deleted["name"] == f"{b}->{a}"
        listed = await admin_cli_json(leader, "flows", "list")
        assert [f["name"] for f in listed["flows"]] == [flow]


#: `python -m mirrorline` with SIGINT raising KeyboardInterrupt, as a terminal starts it.
_SIGINT_AS_ON_A_TERMINAL = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'mirrorline'; runpy.run_module('mirrorline', run_name='__main__')")
