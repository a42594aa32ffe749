"""Real MM2 files run unchanged: naming idioms and config providers, end to end (issue 9)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
from helpers import Record, consume_all, create_topic, produce, wait_for
from procs import mm2_config, replicator

from mirrorline.dev.brokers import LocalBroker
from mirrorline.kafka.watermarks import high_watermarks

pytestmark = pytest.mark.integration


async def exists(bootstrap: str, topic: str) -> bool:
    return bool(await high_watermarks({"bootstrap_servers": bootstrap}, [topic]))


async def test_empty_separator_and_alias_keys_mirror_to_mm2s_names(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path) -> None:
    """The pre-identity-policy idiom `replication.policy.separator =` with
    `source.cluster.alias =`: MM2 names the remote topic "" + "" + topic, i.e. unchanged, and
    the offset-syncs topic `mm2-offset-syncs` + <target.cluster.alias> + `internal`."""
    tag = secrets.token_hex(3)
    a, b, target_alias = f"a{tag}", f"b{tag}", f"t{tag}"
    topic = f"{unique}-orders"
    await create_topic(primary.bootstrap, topic, 2)
    await produce(primary.bootstrap, topic, [Record(b"r%d" % i, partition=i % 2)
                                             for i in range(40)])
    config = mm2_config({a: primary, b: backup}, {f"{a}->{b}": {"topics": f"{unique}-.*"}})
    config += ("replication.policy.separator =\nsource.cluster.alias =\n"
               f"target.cluster.alias = {target_alias}\n")
    async with replicator(config, tmp_path):
        copied = await consume_all(backup.bootstrap, topic, expected=40)
        assert sorted(r.value for rs in copied.values() for r in rs) == \
            sorted(b"r%d" % i for i in range(40))
        syncs = f"mm2-offset-syncs{target_alias}internal"
        await wait_for(lambda: exists(primary.bootstrap, syncs), timeout=30,
                       message=f"offset-syncs topic {syncs} on the source")
    assert not await exists(backup.bootstrap, f"{a}.{topic}")
    assert not await exists(backup.bootstrap, f"{a}{topic}")


async def test_env_and_file_provider_secrets_run_and_stay_out_of_the_log(
        primary: LocalBroker, backup: LocalBroker, unique: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Kubernetes-style secrets: the target's bootstrap list comes from `${env:...}`, the
    topic list and a (here inactive) key password from `${file:...}`; the flow runs, and
    no resolved value appears in the service's output."""
    tag = secrets.token_hex(3)
    a, b = f"a{tag}", f"b{tag}"
    password = f"pw-{secrets.token_hex(8)}"
    secrets_file = tmp_path / "mm2-secrets.properties"
    secrets_file.write_text(f"topics = {unique}-.*\nkey.password = {password}\n")
    monkeypatch.setenv("MIRRORLINE_TEST_TARGET", backup.bootstrap)
    topic = f"{unique}-payments"
    await create_topic(primary.bootstrap, topic, 1)
    await produce(primary.bootstrap, topic, [Record(b"p%d" % i) for i in range(20)])
    config = "\n".join([
        f"clusters = {a}, {b}",
        f"{a}.bootstrap.servers = {primary.bootstrap}",
        f"{b}.bootstrap.servers = ${{env:MIRRORLINE_TEST_TARGET}}",
        "config.providers = env, file",
        "config.providers.env.class = "
        "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
        "config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider",
        f"{a}->{b}.enabled = true",
        f"{a}->{b}.topics = ${{file:{secrets_file}:topics}}",
        f"ssl.key.password = ${{file:{secrets_file}:key.password}}",
        "",
    ])
    async with replicator(config, tmp_path) as proc:
        copied = await consume_all(backup.bootstrap, f"{a}.{topic}", expected=20)
        assert sum(len(rs) for rs in copied.values()) == 20
        output = proc.log_path.read_text(errors="replace")
    assert password not in output
