"""SASL settings of a Java client config -> aiokafka's SASL arguments.

Kafka reads its credentials from a JAAS config (`sasl.jaas.config`); aiokafka takes a
mechanism, a user name and a password, or a Kerberos service name. The mistakes Java only
reports when the login fails -- a JAAS module that does not match the mechanism, a missing
`sasl.mechanism`, a Kerberos library that is not installed -- are `ConfigError`s here,
before anything connects.
"""

from __future__ import annotations

import importlib.util
from typing import Any, Final

from mirrorline.core.errors import ConfigError
from mirrorline.kafka._client_config import ClientConfig
from mirrorline.kafka._jaas import LoginModule, parse_jaas

__all__ = ["gssapi_available", "sasl_kwargs"]

SUPPORTED_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "GSSAPI")


def sasl_kwargs(c: ClientConfig) -> dict[str, Any]:
    mechanism = c.get("sasl.mechanism")
    jaas_text = c.get("sasl.jaas.config")
    jaas = parse_jaas(jaas_text) if jaas_text else None
    if mechanism is None:
        # Kafka's default mechanism is GSSAPI; a PLAIN/SCRAM JAAS config then means a
        # forgotten sasl.mechanism, which Java reports only when the login fails.
        if jaas is not None and jaas.mechanism_family != "GSSAPI":
            raise ConfigError("sasl.mechanism", f"is not set, so Kafka's default GSSAPI "
                              f"applies, but sasl.jaas.config uses {jaas.simple_name}; set "
                              "sasl.mechanism (e.g. PLAIN or SCRAM-SHA-512)")
        mechanism = "GSSAPI"
    mechanism = mechanism.upper()
    if mechanism == "OAUTHBEARER":
        raise ConfigError("sasl.mechanism", "OAUTHBEARER is not supported by Mirrorline; use "
                          "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or GSSAPI")
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError("sasl.mechanism", f"unknown mechanism {mechanism!r}; use "
                          + ", ".join(SUPPORTED_MECHANISMS))
    if mechanism == "GSSAPI":
        return _gssapi(c, jaas)
    return _credentials(mechanism, jaas)


def _credentials(mechanism: str, jaas: LoginModule | None) -> dict[str, Any]:
    family = "PLAIN" if mechanism == "PLAIN" else "SCRAM"
    module = "PlainLoginModule" if family == "PLAIN" else "ScramLoginModule"
    if jaas is None:
        raise ConfigError("sasl.jaas.config", f"is required for SASL/{mechanism}, e.g. "
                          f"org.apache.kafka.common.security.{family.lower()}.{module} required "
                          'username="..." password="...";')
    if jaas.mechanism_family != family:
        raise ConfigError("sasl.jaas.config", f"uses {jaas.simple_name}, but "
                          f"sasl.mechanism={mechanism} needs {module}")
    username, password = jaas.options.get("username"), jaas.options.get("password")
    if not username or password is None:
        raise ConfigError("sasl.jaas.config", f"{module} needs both username=\"...\" and "
                          'password="..." options')
    return {"sasl_mechanism": mechanism, "sasl_plain_username": username,
            "sasl_plain_password": password}


def gssapi_available() -> bool:
    return importlib.util.find_spec("gssapi") is not None


def _gssapi(c: ClientConfig, jaas: LoginModule | None) -> dict[str, Any]:
    if not gssapi_available():
        # aiokafka would only fail when it first connects; say it before anything starts.
        raise ConfigError("sasl.mechanism", "GSSAPI (Kerberos) needs the Python package "
                          "'gssapi', which is not installed")
    service = c.get("sasl.kerberos.service.name")
    if not service and jaas is not None:
        service = jaas.options.get("serviceName")
    if not service:
        raise ConfigError("sasl.kerberos.service.name", "is required for SASL/GSSAPI (the "
                          "Kerberos principal name the brokers run as, usually kafka)")
    # Kerberos credentials come from the environment (ticket cache, KRB5_CLIENT_KTNAME); the
    # keyTab/principal options of a JAAS config cannot be applied, so report it as ignored.
    c.release("sasl.jaas.config")
    return {"sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": service}
