"""A mirror between Apache Kafka clusters secured as real deployments are.

Each cluster has a SASL_SSL listener taking SCRAM-SHA-512 and PLAIN, requiring client
certificates (mutual TLS), with broker key stores in JKS (source) and PKCS12 (target). The
CA, certificates and keys are made with openssl; every trust and key store is made with the
JDK's `keytool`, in JKS and in PKCS12, as MM2 deployments have them. The mirror (a real
`mirrorline replicator` process) reaches both clusters only through SASL_SSL; the test
produces and checks records through the clusters' plain listeners.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import Record, consume_all, produce
from kafka_helpers import create_replicated_topic
from procs import replicator

from mirrorline.dev import kafka
from mirrorline.dev.kafka import LocalKafkaCluster

#: Generous: these tests start their own services (and clusters) on a shared 2-core machine.
pytestmark = [pytest.mark.integration, pytest.mark.kafka_only, pytest.mark.timeout(600)]

STORE_PASSWORD = "store-pw-41d7"
#: The JKS client key has a password of its own (`ssl.key.password`), as keytool allows.
KEY_PASSWORD = "key-pw-93ab"
SCRAM_PASSWORD = "scram-pw-5c2e"
PLAIN_PASSWORD = "plain-pw-7f10"
FORMATS = ("JKS", "PKCS12")
EXTENSION = {"JKS": "jks", "PKCS12": "p12"}
#: How long a service may take to start on a loaded 2-core machine (a ceiling, not a
#: measurement: nothing is asserted about the time taken).
STARTUP_S = 120.0

JAAS = {
    "SCRAM-SHA-512": ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                      f'username="mirror" password="{SCRAM_PASSWORD}";'),
    "PLAIN": ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              f'username="mirror-plain" password="{PLAIN_PASSWORD}";'),
}


def _run(*command: str) -> None:
    env = {**os.environ, "STOREPW": STORE_PASSWORD, "KEYPW": KEY_PASSWORD}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, f"{command[0]} failed: {done.stdout}{done.stderr}"


def _keytool(*args: str) -> None:
    keytool = kafka.java_binary()
    assert keytool is not None
    _run(str(Path(keytool).with_name("keytool")), "-J-XX:TieredStopAtLevel=1",
         "-J-XX:+UseSerialGC", *args)


def _make_pki(d: Path) -> None:
    """CA, broker and client certificates (openssl); trust and key stores (keytool)."""
    _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=mirrorline-test-ca", "-keyout", str(d / "ca.key"),
         "-out", str(d / "ca.pem"))
    (d / "san.ext").write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
    for name in ("broker", "client"):
        _run("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
             "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))
        _run("openssl", "x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"),
             "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
             "-extfile", str(d / "san.ext"), "-out", str(d / f"{name}.pem"))
        _run("openssl", "pkcs12", "-export", "-name", name, "-inkey", str(d / f"{name}.key"),
             "-in", str(d / f"{name}.pem"), "-certfile", str(d / "ca.pem"),
             "-passout", "env:STOREPW", "-out", str(d / f"{name}-openssl.p12"))
        for fmt in FORMATS:
            key_password = "KEYPW" if fmt == "JKS" else "STOREPW"
            _keytool("-importkeystore", "-noprompt", "-srckeystore",
                     str(d / f"{name}-openssl.p12"), "-srcstoretype", "PKCS12",
                     "-srcstorepass:env", "STOREPW", "-srcalias", name,
                     "-destkeystore", str(d / f"{name}.{EXTENSION[fmt]}"),
                     "-deststoretype", fmt, "-deststorepass:env", "STOREPW",
                     "-destkeypass:env", key_password)
    for fmt in FORMATS:
        _keytool("-importcert", "-noprompt", "-alias", "ca", "-file", str(d / "ca.pem"),
                 "-keystore", str(d / f"truststore.{EXTENSION[fmt]}"), "-storetype", fmt,
                 "-storepass:env", "STOREPW")


def _broker_settings(d: Path, fmt: str) -> dict[str, str]:
    listener = "listener.name.sasl_ssl."
    key_password = KEY_PASSWORD if fmt == "JKS" else STORE_PASSWORD
    return {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        f"{listener}scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"{listener}plain.sasl.jaas.config":
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_mirror-plain="{PLAIN_PASSWORD}";',
        f"{listener}ssl.keystore.location": str(d / f"broker.{EXTENSION[fmt]}"),
        f"{listener}ssl.keystore.type": fmt,
        f"{listener}ssl.keystore.password": STORE_PASSWORD,
        f"{listener}ssl.key.password": key_password,
        f"{listener}ssl.truststore.location": str(d / f"truststore.{EXTENSION[fmt]}"),
        f"{listener}ssl.truststore.type": fmt,
        f"{listener}ssl.truststore.password": STORE_PASSWORD,
        f"{listener}ssl.client.auth": "required",
    }


@dataclass(frozen=True)
class Secured:
    pki: Path
    east: LocalKafkaCluster
    west: LocalKafkaCluster


@pytest.fixture(scope="module")
async def secured(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Secured]:
    pki = tmp_path_factory.mktemp("pki")
    await asyncio.to_thread(_make_pki, pki)
    root = tmp_path_factory.mktemp("secured-clusters")
    scram = [f"SCRAM-SHA-512=[name=mirror,password={SCRAM_PASSWORD}]"]
    started = await asyncio.gather(*(
        kafka.start_kafka(alias, directory=root / alias, overrides=_broker_settings(pki, fmt),
                          extra_listeners={"SASL_SSL": "SASL_SSL"}, scram=scram)
        for alias, fmt in (("east", "JKS"), ("west", "PKCS12"))), return_exceptions=True)
    clusters = [c for c in started if isinstance(c, LocalKafkaCluster)]
    try:
        for result in started:
            if isinstance(result, BaseException):
                raise result
        yield Secured(pki, clusters[0], clusters[1])
    finally:
        await asyncio.gather(*(kafka.stop_kafka(c, timeout=2.0) for c in clusters))


def _client_keys(alias: str, pki: Path, fmt: str, mechanism: str,
                 truststore_password: str = STORE_PASSWORD) -> list[str]:
    """How an MM2 file reaches a secured cluster, with stores of format `fmt`."""
    keys = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": mechanism,
        "sasl.jaas.config": JAAS[mechanism],
        "ssl.truststore.location": str(pki / f"truststore.{EXTENSION[fmt]}"),
        "ssl.truststore.type": fmt,
        "ssl.truststore.password": truststore_password,
        "ssl.keystore.location": str(pki / f"client.{EXTENSION[fmt]}"),
        "ssl.keystore.type": fmt,
        "ssl.keystore.password": STORE_PASSWORD,
    }
    if fmt == "JKS":
        keys["ssl.key.password"] = KEY_PASSWORD
    return [f"{alias}.{k} = {v}" for k, v in keys.items()]


def _config(s: Secured, fmt: str, mechanism: str, topics: str, *,
            truststore_password: str = STORE_PASSWORD) -> str:
    lines = ["clusters = east, west",
             f"east.bootstrap.servers = {s.east.bootstrap_for('SASL_SSL')}",
             f"west.bootstrap.servers = {s.west.bootstrap_for('SASL_SSL')}",
             *_client_keys("east", s.pki, fmt, mechanism),
             *_client_keys("west", s.pki, fmt, mechanism, truststore_password),
             "east->west.enabled = true",
             f"east->west.topics = {topics}",
             "east->west.refresh.topics.interval.seconds = 2"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "PLAIN"])
async def test_a_mirror_copies_records_over_sasl_ssl_with_keytool_stores(
        secured: Secured, fmt: str, mechanism: str, unique: str, tmp_path: Path) -> None:
    """MM2's own file for secured clusters -- JKS stores as most have, or PKCS12 -- runs
    unchanged: every record arrives, in order, through SASL_SSL with mutual TLS."""
    topic = f"{unique}.orders"
    await create_replicated_topic(secured.east.bootstrap, topic, 2)
    sent = [Record(value=f"v{n}".encode(), key=f"k{n}".encode(), partition=n % 2)
            for n in range(200)]
    await produce(secured.east.bootstrap, topic, sent)
    config = _config(secured, fmt, mechanism, f"{unique}\\..*")
    async with replicator(config, tmp_path, serving=False) as rep:
        await rep.wait_serving(timeout=STARTUP_S)
        mirrored = await consume_all(secured.west.bootstrap, f"east.{topic}", expected=200,
                                     timeout=STARTUP_S)
        assert STORE_PASSWORD not in rep.log_path.read_text()
    for partition in (0, 1):
        assert [(r.key, r.value) for r in mirrored[partition]] == [
            (r.key, r.value) for r in sent if r.partition == partition]


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_wrong_store_password_is_a_configuration_error_naming_the_key(
        secured: Secured, fmt: str, unique: str, tmp_path: Path) -> None:
    """A wrong truststore password stops the service at start with an error naming the key
    as written in the file and its line -- never the password itself."""
    wrong = "not-the-pw-0c4e"
    config = _config(secured, fmt, "SCRAM-SHA-512", f"{unique}\\..*",
                     truststore_password=wrong)
    async with replicator(config, tmp_path, serving=False) as rep:
        assert await rep.wait(timeout=STARTUP_S) == 2
        log = rep.log_path.read_text()
    line = 1 + config.splitlines().index(f"west.ssl.truststore.password = {wrong}")
    assert "configuration error" in log
    assert f"replicator.properties:{line}: west.ssl.truststore.password: " in log
    assert "wrong or missing password" in log
    assert wrong not in log
    assert STORE_PASSWORD not in log
