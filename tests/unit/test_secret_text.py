"""Secrets and hostile text in what Mirrorline prints and records (issue 19).

Config provider references in flow definitions, the audit trail's masking of imported
properties, errors that quote inputs (JAAS, patterns, resolved values), `config check`
output, and the admin CLI's printing of control and bidi characters. Pure functions; the
end-to-end path through a controller is tests/integration/test_security_providers.py.
"""

from __future__ import annotations

import io
from pathlib import Path
from textwrap import dedent

import pytest

from mirrorline.cli.admin_format import format_flow
from mirrorline.cli.config_check import print_summary
from mirrorline.configfile import parse_config
from mirrorline.core.audit import arguments
from mirrorline.core.errors import ConfigError
from mirrorline.core.flowdefs import Definition, compose
from mirrorline.kafka._jaas import parse_jaas
from mirrorline.v1 import admin_pb2, flows_pb2

BASE = "clusters = a, b\na.bootstrap.servers = a1:9092\nb.bootstrap.servers = b1:9092\n"
PROVIDERS = dedent("""\
    config.providers = env, file, dir
    config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.dir.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider
    """)
SECRET = "s3cr3t-value-42"


def _config_error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    return info.value


# --- config providers in flow definitions ---------------------------------------------------


@pytest.fixture()
def creds(tmp_path: Path) -> Path:
    path = tmp_path / "creds.properties"
    path.write_text(f"password = {SECRET}\ntopics = orders-.*\n")
    return path


@pytest.mark.parametrize("value", [
    "${file:%s:password}(", "${dir:%s/..:creds.properties}", "x ${env:HOME}"])
def test_a_reference_in_a_definition_is_refused_unresolved(creds: Path, value: str) -> None:
    deployment = parse_config(BASE + PROVIDERS)
    reference = value % creds if "%s" in value else value
    with pytest.raises(ConfigError) as info:
        compose(deployment, [Definition("a", "b", {"topics": reference})])
    assert info.value.key == "a->b.topics"
    assert "config provider" in info.value.message
    assert SECRET not in str(info.value)


def test_the_files_own_reference_still_resolves(creds: Path) -> None:
    deployment = parse_config(BASE + PROVIDERS + f"a->b.topics = ${{file:{creds}:topics}}\n")
    reference = f"${{file:{creds}:topics}}"
    flow = compose(deployment, [Definition("a", "b", {"topics": reference})]).flows["a->b"]
    assert flow.topics == ("orders-.*",)
    # ... also for the reverse flow a failback creates with the same properties ...
    reverse = compose(deployment, [Definition("b", "a", {"topics": reference})]).flows["b->a"]
    assert reverse.topics == ("orders-.*",)
    # ... for that property only: the same reference cannot feed another one.
    with pytest.raises(ConfigError):
        compose(deployment, [Definition("a", "b", {"groups": reference})])


@pytest.mark.parametrize("value", ["orders\x1b[2J", "orders\x00", "ord\u202eers", "a\nb"])
def test_control_and_bidi_characters_are_refused_in_definitions(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        compose(parse_config(BASE), [Definition("a", "b", {"topics": value})])
    assert info.value.key == "topics"
    assert "control, bidirectional or terminal escape" in info.value.message


def test_an_error_of_the_file_never_quotes_a_resolved_value(creds: Path) -> None:
    creds.write_text(f"topics = {SECRET}(\n")
    e = _config_error(BASE + PROVIDERS + f"a->b.topics = ${{file:{creds}:topics}}\n")
    assert e.key == "a->b.topics"
    assert SECRET not in str(e)


def test_allowed_paths_name_key_and_line_and_must_be_absolute(creds: Path) -> None:
    e = _config_error(BASE + PROVIDERS
                      + f"config.providers.file.param.allowed.paths = {creds.parent}/sub\n"
                      + f"a.ssl.key.password = ${{file:{creds}:password}}\n")
    assert (e.key, e.line) == ("a.ssl.key.password", 9)
    assert "allowed.paths" in e.message
    e = _config_error(BASE + PROVIDERS + "config.providers.file.param.allowed.paths = etc\n"
                      + f"a.ssl.key.password = ${{file:{creds}:password}}\n")
    assert "not an absolute path" in e.message


def test_an_oversized_input_is_not_echoed_whole() -> None:
    pattern = "x" * 10_000 + "("
    with pytest.raises(ConfigError) as info:
        compose(parse_config(BASE), [Definition("a", "b", {"topics": pattern})])
    assert len(str(info.value)) < 1000
    assert "(10001 characters)" in str(info.value)


# --- the audit trail's masking --------------------------------------------------------------


@pytest.mark.parametrize("text", [
    f"a.ssl.keystore.key:{SECRET}==\n",  # ':' separator, '=' in the (base64) value
    f"a.ssl.key.password\t{SECRET}\n",
    f"a.ssl.key.pass\\\n    word = {SECRET}\n",
    f"a.ssl.key.p\\u0061ssword = {SECRET}\n",
    f"a.ssl.key.password = {SECRET}",  # one line, no line break
])
def test_imported_secrets_are_masked_however_the_properties_are_written(text: str) -> None:
    request = admin_pb2.ImportFlowsRequest(
        properties="a->b.enabled = true\r\n" + text if text.endswith("\n") else text)
    recorded = arguments(request)["properties"]
    assert SECRET not in recorded
    assert "[hidden]" in recorded


def test_masking_keeps_a_text_without_secrets_as_it_was() -> None:
    text = "a->b.enabled: true\ntopics = orders.*\n"
    assert arguments(admin_pb2.ImportFlowsRequest(properties=text))["properties"] == text


# --- errors and printing ----------------------------------------------------------------------


def test_a_jaas_syntax_error_quotes_no_fragment_of_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        parse_jaas('org.apache.kafka.common.security.plain.PlainLoginModule required '
                   'username="u" password=first half;')
    assert "half" not in str(info.value) and "first" not in str(info.value)


def test_config_check_masks_a_misspelt_secret_key(tmp_path: Path) -> None:
    settings = parse_config(BASE + "a->b.enabled = true\n"
                            f"a.ssl.keystore.pasword = {SECRET}\n"
                            f"a.sasl.jass.config = x required password=\"{SECRET}\";\n"
                            f"a.producer.api.token = {SECRET}\n"
                            "a.ssl.keystore.type = PKCS12\n")
    out = io.StringIO()
    print_summary(settings, out, warnings=0)
    assert SECRET not in out.getvalue()
    assert "ssl.keystore.pasword = [hidden]" in out.getvalue()
    assert "ssl.keystore.type = PKCS12" in out.getvalue()


def test_the_cli_prints_control_and_bidi_characters_escaped() -> None:
    from mirrorline.cli.admin_format import printable

    hostile = "orders\x1b]0;owned\x07\x1b[2J\u202egnp.exe\x00"
    flow = admin_pb2.Flow(name="a->b", spec=flows_pb2.FlowSpec(
        source="a", target="b", properties={"topics": hostile}))
    shown = format_flow(flow)
    for raw in ("\x1b", "\x07", "\u202e", "\x00"):
        assert raw not in shown
    assert "orders\\x1b]0;owned\\x07\\x1b[2J\\u202egnp.exe\\x00" in shown
    assert printable("line one\n\tline two\x1b[1A") == "line one\n\tline two\\x1b[1A"
