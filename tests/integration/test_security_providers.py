"""Config providers through the Admin API (issue 19, the critical finding), end to end.

A real controller runs with `config.providers = env, file, dir` in its file, as the docs'
Kubernetes idiom has it, and with a flow whose topics come from a `${file:...}` reference of
that file. The test then acts as an operator with a token would: it sends references to a
private key file, a properties file and an environment variable of the controller's host
through `flows update`, `flows create` and `flows import`, and an import whose secrets are
written in valid properties syntax the old audit masking missed. Every reference is refused
with INVALID_ARGUMENT naming the field; no secret reaches the caller, the audit trail
(`History`) or the controller's log, while the file's own reference keeps working.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
from pathlib import Path

import pytest
from procs import deployment, deployment_config

from mirrorline.dev.brokers import LocalBroker
from mirrorline.v1 import admin_pb2, audit_pb2

pytestmark = pytest.mark.integration

_PROVIDERS = (
    "config.providers = env, file, dir\n"
    "config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider\n"
    "config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider\n"
    "config.providers.dir.class = "
    "org.apache.kafka.common.config.provider.DirectoryConfigProvider\n"
)


async def admin(server: str, *args: str) -> tuple[int, str]:
    """`mirrorline admin` as a subprocess: exit status and everything it printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mirrorline", "admin", "--server", server, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def test_references_sent_through_the_admin_api_are_refused_and_never_resolved(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    tag = secrets.token_hex(3)
    a, b = f"a{tag}", f"b{tag}"
    flow = f"{a}->{b}"
    key_dir = tmp_path / "service-secrets"
    key_dir.mkdir()
    private_key = f"-----BEGIN PRIVATE KEY-----{secrets.token_hex(12)}"
    (key_dir / "service.key").write_text(private_key + "\n")
    password = f"pw{secrets.token_hex(8)}"
    env_secret = f"e{secrets.token_hex(6)}"  # short enough to be a valid separator
    creds = tmp_path / "creds.properties"
    creds.write_text(f"password = {password}\ntopics = {unique}-.*\n")
    monkeypatch.setenv("MIRRORLINE_TEST_ADMIN_SECRET", env_secret)  # the controller inherits it
    leaked = (private_key, password, env_secret)

    config = deployment_config({a: primary, b: backup},
                               {flow: {"topics": f"${{file:{creds}:topics}}"}}) + _PROVIDERS
    async with deployment(config, tmp_path) as d:
        controller = await d.controller("c1")
        await d.leader()
        server = f"127.0.0.1:{controller.grpc_port}"
        attempts = [
            (("flows", "update", flow, "--set", f"topics=${{dir:{key_dir}:service.key}}("),
             "set.topics"),
            (("flows", "update", flow, "--set",
              "replication.policy.separator=${env:MIRRORLINE_TEST_ADMIN_SECRET}"),
             "set.replication.policy.separator"),
            (("flows", "create", f"{b}->{a}", "--topics", f"${{file:{creds}:password}}("),
             "spec.properties.topics"),
        ]
        imported = tmp_path / "import.properties"
        imported.write_text(f"{flow}.enabled = true\n"
                            f"{flow}.topics.exclude = ${{env:MIRRORLINE_TEST_ADMIN_SECRET}}(\n")
        attempts.append((("flows", "import", str(imported)), "topics.exclude"))
        for args, field in attempts:
            code, output = await admin(server, *args)
            assert code != 0, (args, output)
            assert "INVALID_ARGUMENT" in output and field in output, (args, output)
            assert "config provider" in output, (args, output)
            assert not any(s in output for s in leaked), (args, output)

        # Terminal escape sequences and bidi overrides are refused; the refused request is
        # in the audit trail, and `admin history` prints none of them raw.
        hostile = "orders\x1b]0;owned\x07\x1b[2J\u202e"
        code, output = await admin(server, "flows", "update", flow, "--set",
                                   f"topics.exclude={hostile}")
        assert code != 0 and "INVALID_ARGUMENT" in output and "set.topics.exclude" in output
        code, output = await admin(server, "history", "--flow", flow)
        assert code == 0, output
        assert "set.topics.exclude: holds U+001B" in output, output
        assert not any(c in output for c in ("\x1b", "\x07", "\u202e")), output

        # The file's own reference still resolves: the seeded flow validates and changes.
        code, output = await admin(server, "flows", "update", flow, "--set", "offset.lag.max=7")
        assert code == 0, output
        stub = d.admin("c1")
        got = await stub.GetFlow(admin_pb2.FlowRequest(name=flow), timeout=10)
        assert got.spec.properties["topics"] == f"${{file:{creds}:topics}}"
        assert "replication.policy.separator" not in got.spec.properties

        # Secrets written in valid properties syntax the old masking did not read (a tab
        # separator, a \u escape in the key) never reach the audit trail either.
        await stub.ImportFlows(admin_pb2.ImportFlowsRequest(
            properties=(f"{flow}.enabled = true\n{flow}.topics = ${{file:{creds}:topics}}\n"
                        f"{flow}.offset.lag.max = 7\n"
                        f"{a}.ssl.key.password\t{password}\n"
                        f"{a}.ssl.truststore.p\\u0061ssword = {private_key}\n"),
            source_name="mm2.properties"), timeout=20)

        history = await stub.History(audit_pb2.HistoryRequest(limit=100), timeout=10)
        refused = [e for e in history.entries if e.outcome == "INVALID_ARGUMENT"]
        assert len(refused) == 5, history
        trail = str(history)
        assert not any(s in trail for s in leaked), trail
        assert "[hidden]" in trail
        log = controller.log_path.read_text(errors="replace")
        assert not any(s in log for s in leaked)


async def test_an_import_with_many_ignored_keys_is_answered_as_it_was_applied(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """An import under the size bound but with 100 000 keys that are not flow properties:
    its reply used to name each of them and overflow gRPC's message limit, so the caller got
    RESOURCE_EXHAUSTED for an import that had been applied and audited OK. The reply now
    names a bounded number of them; the caller's answer and the audit trail agree."""
    tag = secrets.token_hex(3)
    a, b = f"a{tag}", f"b{tag}"
    flow = f"{a}->{b}"
    ignored = "".join(f"k{i}\n" for i in range(100_000))
    async with deployment(deployment_config({a: primary, b: backup}), tmp_path) as d:
        await d.controller("c1")
        await d.leader()
        stub = d.admin("c1")
        reply = await stub.ImportFlows(admin_pb2.ImportFlowsRequest(
            properties=f"{flow}.enabled = true\n{flow}.topics = {unique}-.*\n" + ignored,
            source_name="big.properties"), timeout=60)
        assert list(reply.created) == [flow]
        assert len(reply.warnings) <= 51 and "more keys ignored" in reply.warnings[-1]
        history = await stub.History(audit_pb2.HistoryRequest(), timeout=10)
        assert [(e.rpc, e.outcome) for e in history.entries] == [("ImportFlows", "OK")]
