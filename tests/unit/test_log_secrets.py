"""No secret reaches a log handler: the filter `mirrorline.runtime.configure_logging` puts
on every handler (`mirrorline.logsecrets`), and the mode checks of credential files
(`mirrorline.secretfiles`). The end-to-end tests are in
tests/integration/test_security_files.py."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirrorline import logsecrets
from mirrorline.core.errors import ConfigError
from mirrorline.secretfiles import check_secret_files


class SaslAuthenticateRequest_v1:  # named as aiokafka names it
    def __repr__(self) -> str:
        return "SaslAuthenticateRequest_v1(sasl_auth_bytes=b'u\\x00u\\x00hunter2-pw')"


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    logsecrets.install([handler])
    logger = logging.getLogger(f"test-log-secrets-{id(out)}")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, out
    logger.removeHandler(handler)


def test_a_sasl_authentication_request_is_logged_by_name_only(
        captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = captured
    logger.debug("Request to %s:%d %d: %s", "h", 1, 3, SaslAuthenticateRequest_v1())
    text = out.getvalue()
    assert "SaslAuthenticateRequest_v1([hidden])" in text and "hunter2" not in text


def test_the_files_secrets_are_hidden_in_messages_and_tracebacks_in_every_printed_form(
        captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, out = captured
    password = "p'ss\\wörd-1"
    logsecrets.register_config({
        "b.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                              f'required username="u" password="{password}";',
        "b.ssl.keystore.password": "store-secret-2",
        "b.bootstrap.servers": "host:9092",
    }, ["resolved-secret-3"])
    logger.info("config %r", {"password": password})
    logger.info("bytes %r", password.encode())
    logger.info("store-secret-2 and resolved-secret-3 at host:9092")
    try:
        raise ValueError(f"bad {password}")
    except ValueError:
        logger.exception("failed")
    text = out.getvalue()
    for secret in ("ss\\", "wörd", "w\\xc3\\xb6rd", "w\\xf6rd", "store-secret-2",
                   "resolved-secret-3"):
        assert secret not in text, (secret, text)
    assert "host:9092" in text and text.count("[hidden]") >= 5


def test_a_tokens_file_others_may_write_is_refused_naming_key_line_and_file(
        tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text("")
    tokens.chmod(0o620)
    raw = {"mirrorline.admin.tokens.file": str(tokens)}
    with pytest.raises(ConfigError) as error:
        check_secret_files(raw, {"mirrorline.admin.tokens.file": 7}, "/etc/m.properties")
    assert str(error.value).startswith(
        f"/etc/m.properties:7: mirrorline.admin.tokens.file: {tokens} is writable by its "
        "group (mode 0620)")
    tokens.chmod(0o644)
    assert check_secret_files(raw, {}, None) == []


def test_keys_and_tokens_others_may_read_are_named_once(tmp_path: Path) -> None:
    key, token, store = (tmp_path / n for n in ("service.key", "service.token", "ks.p12"))
    for path in (key, token, store):
        path.write_text("-----BEGIN PRIVATE KEY-----")
    key.chmod(0o640)
    token.chmod(0o604)
    store.chmod(0o600)
    raw = {"mirrorline.grpc.tls.key": str(key),
           "mirrorline.grpc.service.token.file": str(token),
           "b.ssl.keystore.location": str(store)}
    warnings = check_secret_files(raw, {"mirrorline.grpc.tls.key": 3}, None)
    assert [(w.key, w.line) for w in warnings] == [
        ("mirrorline.grpc.service.token.file", None), ("mirrorline.grpc.tls.key", 3)]
    assert "readable by other users (mode 0604)" in warnings[0].message
    assert "readable by its group (mode 0640)" in warnings[1].message
    assert not any("PRIVATE" in w.message for w in warnings)
