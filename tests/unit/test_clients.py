"""Java client configs -> aiokafka keyword arguments (mirrorline.kafka.clients)."""

from __future__ import annotations

import datetime
import inspect
import ssl
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mirrorline.core.errors import ConfigError
from mirrorline.kafka import _client_sasl, clients, tls
from mirrorline.kafka._jaas import parse_jaas
from mirrorline.kafka.clients import admin_kwargs, consumer_kwargs, producer_kwargs

BOOT = {"bootstrap.servers": "k1:9092, k2:9093"}
SECRET = "s3cr3t-Pa55"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              f'username="mirror" password="{SECRET}";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
              f'username="mirror" password="{SECRET}";')


def error(build: Callable[[dict[str, str]], Any], cfg: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        build({**BOOT, **cfg})
    assert SECRET not in str(info.value)
    return info.value


# --- plain settings -------------------------------------------------------------------------


def test_consumer_translation() -> None:
    kwargs, ignored = consumer_kwargs({
        **BOOT, "client.id": "x->y|c", "group.id": "g", "auto.offset.reset": "EARLIEST",
        "enable.auto.commit": "false", "max.partition.fetch.bytes": "2097152",
        "fetch.max.bytes": "1000", "fetch.min.bytes": "10", "fetch.max.wait.ms": "250",
        "max.poll.records": "500", "isolation.level": "read_committed",
        "request.timeout.ms": "30000", "retry.backoff.ms": "50", "metadata.max.age.ms": "1000",
        "connections.max.idle.ms": "9000", "check.crcs": "False",
        "receive.buffer.bytes": "65536", "send.buffer.bytes": "131072",
        "max.poll.interval.ms": "120000", "key.deserializer": "x", "not.a.kafka.key": "1",
    })
    assert kwargs == {
        "bootstrap_servers": ["k1:9092", "k2:9093"], "client_id": "x->y|c", "group_id": "g",
        "auto_offset_reset": "earliest", "enable_auto_commit": False,
        "max_partition_fetch_bytes": 2097152, "fetch_max_bytes": 1000, "fetch_min_bytes": 10,
        "fetch_max_wait_ms": 250, "max_poll_records": 500, "isolation_level": "read_committed",
        "request_timeout_ms": 30000, "retry_backoff_ms": 50, "metadata_max_age_ms": 1000,
        "connections_max_idle_ms": 9000, "check_crcs": False, "max_poll_interval_ms": 120000,
        "security_protocol": "PLAINTEXT",
    }
    assert ignored == ["key.deserializer", "not.a.kafka.key", "receive.buffer.bytes",
                       "send.buffer.bytes"]


def test_producer_translation() -> None:
    kwargs, ignored = producer_kwargs({
        **BOOT, "acks": "all", "batch.size": "65536", "linger.ms": "5",
        "compression.type": "gzip", "max.request.size": "2000000", "request.timeout.ms": "1",
        "retry.backoff.ms": "2", "enable.idempotence": "true", "metadata.max.age.ms": "3",
        "connections.max.idle.ms": "4", "max.in.flight.requests.per.connection": "1",
        "delivery.timeout.ms": "120000",
    })
    assert kwargs == {
        "bootstrap_servers": ["k1:9092", "k2:9093"], "acks": "all", "max_batch_size": 65536,
        "linger_ms": 5, "compression_type": "gzip", "max_request_size": 2000000,
        "request_timeout_ms": 1, "retry_backoff_ms": 2, "enable_idempotence": True,
        "metadata_max_age_ms": 3, "connections_max_idle_ms": 4,
        "security_protocol": "PLAINTEXT",
    }
    assert ignored == ["delivery.timeout.ms"]  # max.in.flight: the flow's producer applies it


def test_admin_translation() -> None:
    kwargs, ignored = admin_kwargs({**BOOT, "client.id": "adm", "request.timeout.ms": "5",
                                    "default.api.timeout.ms": "6"})
    assert kwargs == {"bootstrap_servers": ["k1:9092", "k2:9093"], "client_id": "adm",
                      "request_timeout_ms": 5, "security_protocol": "PLAINTEXT"}
    assert ignored == ["default.api.timeout.ms"]


@pytest.mark.parametrize(("value", "expected"), [("all", "all"), ("-1", "all"), ("ALL", "all"),
                                                 ("0", 0), ("1", 1)])
def test_acks(value: str, expected: object) -> None:
    assert producer_kwargs({**BOOT, "acks": value})[0]["acks"] == expected


def test_compression_none() -> None:
    assert producer_kwargs({**BOOT, "compression.type": "none"})[0]["compression_type"] is None


def test_compression_library_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(clients._COMPRESSION, "zstd", (lambda: False, "the package 'x'"))
    err = error(producer_kwargs, {"compression.type": "zstd"})
    assert err.key == "compression.type"
    assert "not installed" in str(err)


@pytest.mark.parametrize(("build", "key", "value"), [
    (consumer_kwargs, "fetch.max.bytes", "lots"),
    (consumer_kwargs, "max.poll.records", "0"),
    (consumer_kwargs, "fetch.min.bytes", "-1"),
    (consumer_kwargs, "request.timeout.ms", "1.5"),
    (consumer_kwargs, "check.crcs", "yes"),
    (consumer_kwargs, "auto.offset.reset", "by_duration:PT1H"),
    (consumer_kwargs, "isolation.level", "committed"),
    (producer_kwargs, "acks", "2"),
    (producer_kwargs, "batch.size", "big"),
    (producer_kwargs, "linger.ms", "-5"),
    (producer_kwargs, "compression.type", "brotli"),
    (producer_kwargs, "enable.idempotence", "maybe"),
    (admin_kwargs, "metadata.max.age.ms", "soon"),
    (admin_kwargs, "security.protocol", "TLS"),
])
def test_bad_values_name_the_key(build: Callable[[dict[str, str]], Any], key: str,
                                 value: str) -> None:
    err = error(build, {key: value})
    assert err.key == key
    assert key in str(err)


@pytest.mark.parametrize("servers", ["", " , ", "k1", "k1:port", ":9092"])
def test_bad_bootstrap_servers(servers: str) -> None:
    with pytest.raises(ConfigError) as info:
        admin_kwargs({"bootstrap.servers": servers})
    assert info.value.key == "bootstrap.servers"


def test_missing_bootstrap_servers() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        consumer_kwargs({})


def test_ipv6_bootstrap() -> None:
    assert admin_kwargs({"bootstrap.servers": "[::1]:9092"})[0]["bootstrap_servers"] == [
        "[::1]:9092"]


def test_idempotence_needs_acks_all() -> None:
    assert error(producer_kwargs, {"enable.idempotence": "true", "acks": "1"}).key == "acks"


@pytest.mark.parametrize(("build", "cls"), [(consumer_kwargs, AIOKafkaConsumer),
                                            (producer_kwargs, AIOKafkaProducer),
                                            (admin_kwargs, AIOKafkaAdminClient)])
def test_every_argument_exists_in_aiokafka(build: Callable[[dict[str, str]], Any],
                                           cls: type) -> None:
    everything = {
        **BOOT, "client.id": "c", "group.id": "g", "group.instance.id": "i", "client.rack": "r",
        "enable.auto.commit": "true", "auto.commit.interval.ms": "1", "fetch.max.wait.ms": "1",
        "fetch.max.bytes": "1", "fetch.min.bytes": "1", "max.partition.fetch.bytes": "1",
        "max.poll.records": "1", "max.poll.interval.ms": "1", "session.timeout.ms": "1",
        "heartbeat.interval.ms": "1", "check.crcs": "true", "exclude.internal.topics": "true",
        "auto.offset.reset": "latest", "isolation.level": "read_committed", "acks": "all",
        "batch.size": "1", "linger.ms": "1", "compression.type": "gzip",
        "max.request.size": "1", "enable.idempotence": "true", "transaction.timeout.ms": "1",
        "request.timeout.ms": "1", "retry.backoff.ms": "1", "metadata.max.age.ms": "1",
        "connections.max.idle.ms": "1", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS,
    }
    kwargs, _ = build(everything)
    parameters = inspect.signature(cls.__init__).parameters
    assert set(kwargs) <= set(parameters)


# --- SASL -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("mechanism", "jaas"), [("PLAIN", PLAIN_JAAS),
                                                 ("SCRAM-SHA-256", SCRAM_JAAS),
                                                 ("scram-sha-512", SCRAM_JAAS)])
def test_sasl_credentials(mechanism: str, jaas: str) -> None:
    kwargs, ignored = consumer_kwargs({**BOOT, "security.protocol": "SASL_PLAINTEXT",
                                       "sasl.mechanism": mechanism, "sasl.jaas.config": jaas,
                                       "sasl.login.refresh.window.factor": "0.8"})
    assert kwargs["security_protocol"] == "SASL_PLAINTEXT"
    assert kwargs["sasl_mechanism"] == mechanism.upper()
    assert (kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == ("mirror", SECRET)
    assert "ssl_context" not in kwargs
    assert ignored == ["sasl.login.refresh.window.factor"]


def test_sasl_ssl_has_both() -> None:
    kwargs, _ = producer_kwargs({**BOOT, "security.protocol": "sasl_ssl",
                                 "sasl.mechanism": "PLAIN", "sasl.jaas.config": PLAIN_JAAS})
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["sasl_plain_password"] == SECRET


def test_sasl_settings_are_inactive_without_sasl_protocol() -> None:
    kwargs, ignored = admin_kwargs({**BOOT, "sasl.mechanism": "OAUTHBEARER",
                                    "sasl.jaas.config": "garbage", "ssl.keystore.type": "JKS"})
    assert "sasl_mechanism" not in kwargs
    assert ignored == []


@pytest.mark.parametrize(("cfg", "key", "text"), [
    ({"sasl.mechanism": "OAUTHBEARER"}, "sasl.mechanism", "not supported"),
    ({"sasl.mechanism": "DIGEST-MD5"}, "sasl.mechanism", "unknown mechanism"),
    ({"sasl.mechanism": "PLAIN"}, "sasl.jaas.config", "is required"),
    ({"sasl.mechanism": "PLAIN", "sasl.jaas.config": SCRAM_JAAS}, "sasl.jaas.config",
     "ScramLoginModule"),
    ({"sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": PLAIN_JAAS}, "sasl.jaas.config",
     "PlainLoginModule"),
    ({"sasl.jaas.config": PLAIN_JAAS}, "sasl.mechanism", "GSSAPI"),
    ({"sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'x.PlainLoginModule required password="{SECRET}";'},
     "sasl.jaas.config", "username"),
    ({"sasl.mechanism": "GSSAPI"}, "sasl.kerberos.service.name", "required"),
])
@pytest.mark.usefixtures("gssapi")
def test_sasl_errors(cfg: dict[str, str], key: str, text: str) -> None:
    err = error(consumer_kwargs, {"security.protocol": "SASL_PLAINTEXT", **cfg})
    assert err.key == key
    assert text in str(err)


@pytest.fixture
def gssapi(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_client_sasl, "gssapi_available", lambda: True)


def test_gssapi_needs_the_gssapi_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_client_sasl, "gssapi_available", lambda: False)
    err = error(consumer_kwargs, {"security.protocol": "SASL_PLAINTEXT",
                                  "sasl.kerberos.service.name": "kafka"})
    assert err.key == "sasl.mechanism"
    assert "gssapi" in str(err)


@pytest.mark.usefixtures("gssapi")
def test_gssapi() -> None:
    kwargs, ignored = consumer_kwargs({**BOOT, "security.protocol": "SASL_PLAINTEXT",
                                       "sasl.mechanism": "GSSAPI",
                                       "sasl.kerberos.service.name": "kafka-svc"})
    assert (kwargs["sasl_mechanism"], kwargs["sasl_kerberos_service_name"]) == (
        "GSSAPI", "kafka-svc")
    assert ignored == []


@pytest.mark.usefixtures("gssapi")
def test_gssapi_service_name_from_jaas_and_jaas_reported_as_ignored() -> None:
    jaas = ('com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true '
            'keyTab="/etc/k.keytab" principal="mm2@EXAMPLE.COM" serviceName="kafka";')
    kwargs, ignored = admin_kwargs({**BOOT, "security.protocol": "SASL_SSL",
                                    "sasl.jaas.config": jaas})
    assert (kwargs["sasl_mechanism"], kwargs["sasl_kerberos_service_name"]) == (
        "GSSAPI", "kafka")
    assert ignored == ["sasl.jaas.config"]


def test_jaas_syntax() -> None:
    module = parse_jaas(
        "  org.apache.kafka.common.security.scram.ScramLoginModule   REQUIRED\n"
        "  // a comment\n  username = 'single \\'quoted\\'' /* another */\n"
        '  password="a\\"b\\\\c;d=e"  tokenauth=true ;  ')
    assert module.simple_name == "ScramLoginModule"
    assert module.flag == "required"
    assert module.options == {"username": "single 'quoted'", "password": 'a"b\\c;d=e',
                              "tokenauth": "true"}
    assert SECRET not in repr(parse_jaas(PLAIN_JAAS))


@pytest.mark.parametrize("jaas", [
    "",
    f'PlainLoginModule username="u" password="{SECRET}";',                 # no flag
    f'PlainLoginModule required username="u" password="{SECRET}"',       # no ';'
    f'PlainLoginModule required username="u" password "{SECRET}";',      # no '='
    f'PlainLoginModule required username="u" password="{SECRET};',       # unterminated
    f'PlainLoginModule required password="{SECRET}"; Other required;',   # two modules
    f'PlainLoginModule required password=;"{SECRET}"',
])
def test_bad_jaas_never_shows_the_password(jaas: str) -> None:
    err = error(consumer_kwargs, {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                  "sasl.jaas.config": jaas})
    assert err.key == "sasl.jaas.config"


# --- SSL ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    client_cert: Path
    client_key: Path
    client_key_encrypted: Path
    client_combined: Path
    key_password: str


def _self_signed(name: str) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    """A one-day self-signed certificate (PEM) and its P-256 key."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return cert.public_bytes(serialization.Encoding.PEM), key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    ca_pem, _ = _self_signed("mirrorline-test-ca")
    client_pem, client_key = _self_signed("mirrorline-client")
    (d / "ca.pem").write_bytes(ca_pem)
    (d / "client.pem").write_bytes(client_pem)
    (d / "client.key").write_bytes(client_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (d / "client-enc.key").write_bytes(client_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(SECRET.encode())))
    combined = d / "client-combined.pem"
    combined.write_text((d / "client-enc.key").read_text() + (d / "client.pem").read_text())
    return Pki(d / "ca.pem", d / "client.pem", d / "client.key", d / "client-enc.key",
               combined, SECRET)


def ssl_context(cfg: dict[str, str]) -> ssl.SSLContext:
    kwargs, _ = consumer_kwargs({**BOOT, "security.protocol": "SSL", **cfg})
    context = kwargs["ssl_context"]
    assert isinstance(context, ssl.SSLContext)
    return context


def subjects(context: ssl.SSLContext) -> list[str]:
    return [str(dict(rdn[0] for rdn in cert["subject"]).get("commonName"))
            for cert in context.get_ca_certs()]


@pytest.mark.parametrize("store_type", ["PEM", "pem", None])
def test_truststore_location_is_loaded(pki: Pki, store_type: str | None) -> None:
    cfg = {"ssl.truststore.location": str(pki.ca)}
    if store_type:
        cfg["ssl.truststore.type"] = store_type
    context = ssl_context(cfg)
    assert subjects(context) == ["mirrorline-test-ca"]
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname


def test_inline_truststore_certificates_even_without_line_breaks(pki: Pki) -> None:
    # What a `\` continuation leaves: the PEM on one line, pieces separated by spaces.
    one_line = " ".join(pki.ca.read_text().split())
    context = ssl_context({"ssl.truststore.certificates": one_line,
                           "ssl.truststore.type": "PEM"})
    assert subjects(context) == ["mirrorline-test-ca"]


def test_no_truststore_uses_system_defaults() -> None:
    context = ssl_context({})
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert "mirrorline-test-ca" not in subjects(context)


@pytest.mark.parametrize(("value", "check"), [("", False), ("https", True), ("HTTPS", True)])
def test_endpoint_identification(value: str, check: bool) -> None:
    context = ssl_context({"ssl.endpoint.identification.algorithm": value})
    assert context.check_hostname is check
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_bad_endpoint_identification() -> None:
    assert error(consumer_kwargs, {"security.protocol": "SSL",
                                   "ssl.endpoint.identification.algorithm": "ldaps"}
                 ).key == "ssl.endpoint.identification.algorithm"


def _jks(pki: Pki, path: Path, *, with_key: bool, key_password: str = "keypw-2") -> Path:
    """A JKS store made by the JDK's keytool, as MM2 deployments have: the test CA as a
    trusted entry, or the client key (from a PKCS12 store) under a key password of its own."""
    keytool = tls.keytool()
    if keytool is None:
        pytest.skip("needs the JDK's keytool")
    target = ["-destkeystore", str(path), "-deststoretype", "JKS", "-deststorepass", "storepw-1"]
    if with_key:
        source = _pkcs12(pki, path.with_suffix(".src.p12"), "srcpw-1", with_key=True)
        command = ["-importkeystore", "-noprompt", "-srckeystore", str(source),
                   "-srcstoretype", "PKCS12", "-srcstorepass", "srcpw-1", "-srcalias", "client",
                   "-destkeypass", key_password, *target]
    else:
        command = ["-importcert", "-noprompt", "-alias", "ca", "-file", str(pki.ca),
                   "-keystore", str(path), "-storetype", "JKS", "-storepass", "storepw-1"]
    done = subprocess.run([keytool, *command], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return path


def test_jks_stores_are_loaded(pki: Pki, tmp_path: Path) -> None:
    """Kafka's default store type, JKS, is read as Java clients read it: the trust store's
    certificates are trusted, and the key store's key opens with `ssl.key.password`."""
    trust = _jks(pki, tmp_path / "trust.jks", with_key=False)
    keys = _jks(pki, tmp_path / "keys.jks", with_key=True)
    context = ssl_context({"ssl.truststore.location": str(trust),
                           "ssl.truststore.type": "JKS",
                           "ssl.truststore.password": "storepw-1",
                           "ssl.keystore.location": str(keys),
                           "ssl.keystore.password": "storepw-1",  # no type: Kafka's JKS
                           "ssl.key.password": "keypw-2"})
    assert "mirrorline-test-ca" in subjects(context)


@pytest.mark.parametrize(("cfg", "key"), [
    ({"ssl.truststore.password": SECRET}, "ssl.truststore.password"),
    ({"ssl.keystore.password": SECRET}, "ssl.keystore.password"),
    ({"ssl.key.password": SECRET}, "ssl.key.password"),
])
def test_a_wrong_jks_password_names_its_key_and_not_the_password(
        pki: Pki, tmp_path: Path, cfg: dict[str, str], key: str) -> None:
    trust = _jks(pki, tmp_path / "trust.jks", with_key=False)
    keys = _jks(pki, tmp_path / "keys.jks", with_key=True)
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.truststore.location": str(trust),
                                  "ssl.truststore.type": "JKS",
                                  "ssl.truststore.password": "storepw-1",
                                  "ssl.keystore.location": str(keys),
                                  "ssl.keystore.type": "JKS",
                                  "ssl.keystore.password": "storepw-1",
                                  "ssl.key.password": "keypw-2", **cfg})
    assert err.key == key
    assert "wrong or missing" in str(err)


def test_jks_without_a_jdk_says_how_to_convert(pki: Pki, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A host without a JDK (simulated: no keytool found) gets the one conversion command."""
    trust = _jks(pki, tmp_path / "trust.jks", with_key=False)
    monkeypatch.setattr(tls, "keytool", lambda: None)
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.truststore.location": str(trust),
                                  "ssl.truststore.type": "JKS",
                                  "ssl.truststore.password": "other-pw-5"})
    assert err.key == "ssl.truststore.type"
    assert "keytool -importkeystore" in str(err)
    assert "-deststoretype PKCS12" in str(err)


def _pkcs12(pki: Pki, path: Path, password: str, *, with_key: bool) -> Path:
    """A PKCS12 store made with `cryptography`, as keytool/openssl would write one."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    cert = x509.load_pem_x509_certificate(pki.client_cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca.read_bytes())
    key = serialization.load_pem_private_key(pki.client_key.read_bytes(), None)
    encryption = serialization.BestAvailableEncryption(password.encode())
    if with_key:
        data = pkcs12.serialize_key_and_certificates(b"client", key, cert, None, encryption)
    else:
        data = pkcs12.serialize_key_and_certificates(b"ca", None, None, [ca], encryption)
    path.write_bytes(data)
    return path


def test_pkcs12_stores_are_loaded(pki: Pki, tmp_path: Path) -> None:
    """Kafka clients read PKCS12 trust and key stores (`ssl.*.type = PKCS12`, opened with
    `ssl.*.password`); Mirrorline reads the same files."""
    trust = _pkcs12(pki, tmp_path / "trust.p12", "trustpw", with_key=False)
    keys = _pkcs12(pki, tmp_path / "keys.p12", "keypw", with_key=True)
    context = ssl_context({"ssl.truststore.location": str(trust),
                           "ssl.truststore.type": "PKCS12",
                           "ssl.truststore.password": "trustpw",
                           "ssl.keystore.location": str(keys), "ssl.keystore.type": "pkcs12",
                           "ssl.keystore.password": "keypw"})
    subjects = [dict(x[0] for x in c["subject"]) for c in context.get_ca_certs()]
    assert {"commonName": "mirrorline-test-ca"} in subjects


def test_pkcs12_wrong_password_names_the_password_key(pki: Pki, tmp_path: Path) -> None:
    trust = _pkcs12(pki, tmp_path / "trust.p12", "trustpw", with_key=False)
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.truststore.location": str(trust),
                                  "ssl.truststore.type": "PKCS12",
                                  "ssl.truststore.password": "guess-9f3k"})
    assert err.key == "ssl.truststore.password"
    assert "wrong or missing password" in str(err)
    assert "guess-9f3k" not in str(err)


def test_pkcs12_type_on_a_pem_file_is_a_clear_error(pki: Pki) -> None:
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.keystore.location": str(pki.client_cert),
                                  "ssl.keystore.type": "PKCS12"})
    assert err.key == "ssl.keystore.location"
    assert "PKCS12" in str(err)


def test_type_less_binary_store_is_read_as_jks(tmp_path: Path) -> None:
    """Kafka's default store type is JKS: a type-less store that is not PEM is read as JKS
    (here a truncated one, so the error names the location)."""
    if tls.keytool() is None:
        pytest.skip("needs the JDK's keytool")
    store = tmp_path / "truststore.jks"
    store.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02")
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.truststore.location": str(store)})
    assert err.key == "ssl.truststore.location"
    assert "not a JKS store" in str(err)


def test_missing_truststore_file(tmp_path: Path) -> None:
    err = error(consumer_kwargs, {"security.protocol": "SSL", "ssl.truststore.type": "PEM",
                                  "ssl.truststore.location": str(tmp_path / "nope.pem")})
    assert err.key == "ssl.truststore.location"
    assert "nope.pem" in str(err)


def test_not_a_certificate(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.truststore.location": str(bogus)})
    assert err.key == "ssl.truststore.location"


def test_truststore_location_and_certificates_conflict(pki: Pki) -> None:
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.truststore.location": str(pki.ca),
                                  "ssl.truststore.certificates": pki.ca.read_text()})
    assert err.key == "ssl.truststore.certificates"


def test_keystore_file_with_encrypted_key(pki: Pki) -> None:
    kwargs, ignored = admin_kwargs({**BOOT, "security.protocol": "SSL",
                                    "ssl.keystore.location": str(pki.client_combined),
                                    "ssl.keystore.type": "PEM",
                                    "ssl.key.password": pki.key_password,
                                    "ssl.keystore.password": "unused",
                                    "ssl.truststore.location": str(pki.ca)})
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert ignored == ["ssl.keystore.password"]


@pytest.mark.parametrize("password", [None, "wrong-password"])
def test_keystore_wrong_or_missing_password(pki: Pki, password: str | None) -> None:
    cfg = {"security.protocol": "SSL", "ssl.keystore.location": str(pki.client_combined),
           "ssl.keystore.type": "PEM"}
    if password is not None:
        cfg["ssl.key.password"] = password
    err = error(consumer_kwargs, cfg)
    assert err.key == "ssl.keystore.location"
    assert "ssl.key.password" in str(err)
    assert str(password) not in str(err)


def test_inline_keystore_uses_a_private_temp_file_that_is_removed(
        pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    real_mkstemp = tempfile.mkstemp

    def spy(*args: Any, **kwargs: Any) -> tuple[int, str]:
        fd, path = real_mkstemp(*args, **kwargs)
        created.append(path)
        assert Path(path).stat().st_mode & 0o077 == 0
        return fd, path

    monkeypatch.setattr(tempfile, "mkstemp", spy)
    context = ssl_context({"ssl.keystore.certificate.chain": pki.client_cert.read_text(),
                           "ssl.keystore.key": pki.client_key_encrypted.read_text(),
                           "ssl.key.password": pki.key_password,
                           "ssl.keystore.type": "PEM"})
    assert isinstance(context, ssl.SSLContext)
    assert len(created) == 1
    assert not Path(created[0]).exists()


def test_inline_keystore_needs_both_parts(pki: Pki) -> None:
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.keystore.key": pki.client_key.read_text()})
    assert err.key == "ssl.keystore.certificate.chain"


def test_inline_key_that_is_not_pem() -> None:
    err = error(consumer_kwargs, {"security.protocol": "SSL",
                                  "ssl.keystore.key": SECRET,
                                  "ssl.keystore.certificate.chain": "also not pem"})
    assert err.key == "ssl.keystore.key"


def test_ssl_settings_without_ssl_protocol_are_inactive() -> None:
    kwargs, ignored = consumer_kwargs({**BOOT, "ssl.truststore.location": "/nowhere.jks",
                                       "ssl.truststore.type": "JKS"})
    assert "ssl_context" not in kwargs
    assert ignored == []


def test_unsupported_ssl_settings_are_reported(pki: Pki) -> None:
    _, ignored = consumer_kwargs({**BOOT, "security.protocol": "SSL",
                                  "ssl.truststore.location": str(pki.ca),
                                  "ssl.truststore.password": "changeit",
                                  "ssl.enabled.protocols": "TLSv1.3",
                                  "ssl.cipher.suites": "x"})
    assert ignored == ["ssl.cipher.suites", "ssl.enabled.protocols", "ssl.truststore.password"]
