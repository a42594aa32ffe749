"""Reading `sasl.jaas.config`, Kafka's inline JAAS login-module configuration.

aiokafka wants a username and password, Kafka configs carry them inside a JAAS entry such as
`org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";`.
This follows Kafka's `JaasConfig` grammar (a `StreamTokenizer`: words, single- or
double-quoted strings with backslash escapes, `//` and `/* */` comments) closely enough for
every configuration Kafka accepts, and -- like Kafka's client -- insists on exactly one login
module. The text holds a password, so no error message ever quotes it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from mirrorline.core.errors import ConfigError

_KEY: Final = "sasl.jaas.config"
_FLAGS: Final = ("required", "requisite", "sufficient", "optional")
_FAMILIES: Final = {
    "PlainLoginModule": "PLAIN",
    "ScramLoginModule": "SCRAM",
    "Krb5LoginModule": "GSSAPI",
    "OAuthBearerLoginModule": "OAUTHBEARER",
}
_TOKEN: Final = re.compile(r"""
      (?P<space>\s+|//[^\n]*|/\*.*?\*/)
    | (?P<quoted>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<symbol>[=;])
    | (?P<word>[^\s=;"']+)
""", re.VERBOSE | re.DOTALL)
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


@dataclass(frozen=True)
class LoginModule:
    """One JAAS entry. `options` is hidden from repr: it usually contains a password."""

    class_name: str
    flag: str
    options: dict[str, str] = field(repr=False)

    @property
    def simple_name(self) -> str:
        return self.class_name.rsplit(".", 1)[-1]

    @property
    def mechanism_family(self) -> str | None:
        """PLAIN, SCRAM, GSSAPI, OAUTHBEARER, or None for an unknown login module."""
        return _FAMILIES.get(self.simple_name)


def parse_jaas(text: str) -> LoginModule:
    """Parse a `sasl.jaas.config` value holding exactly one login module."""
    tokens = _tokens(text)
    if not tokens:
        raise ConfigError(_KEY, "contains no login module")
    position = 0

    def take(kind: str, what: str) -> str:
        nonlocal position
        if position >= len(tokens) or tokens[position][0] not in kind.split("|"):
            raise ConfigError(_KEY, f"expected {what} (syntax: <LoginModule class> required "
                                    'key="value" ...;)')
        position += 1
        return tokens[position - 1][1]

    class_name = take("word", "the login module class name")
    flag = take("word", "a control flag (required, requisite, sufficient or optional)")
    if flag.lower() not in _FLAGS:
        raise ConfigError(_KEY, "the login module class must be followed by a control flag "
                                "(required, requisite, sufficient or optional)")
    options: dict[str, str] = {}
    while position < len(tokens) and tokens[position] != ("symbol", ";"):
        # Errors count options instead of naming them: after a value with a blank in it
        # (an unquoted password), the "option name" is the rest of the password.
        number = len(options) + 1
        name = take("word", f"an option name (option {number})")
        if take("symbol", f"'=' after option {number}") != "=":
            raise ConfigError(_KEY, f"expected '=' after option {number} (quote a value "
                                    'that holds blanks: password="...")')
        options[name] = take("word|quoted", f"a value for option {number}")
    take("symbol", "';' at the end of the login module entry")
    if position < len(tokens):
        raise ConfigError(_KEY, "must contain exactly one login module (one entry ending "
                                "with ';')")
    return LoginModule(class_name, flag.lower(), options)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ConfigError(_KEY, "has an unterminated quoted string or comment")
        position = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind == "space":
            continue
        value = match.group()
        if kind == "quoted":
            value = _unquote(value[1:-1])
        tokens.append((kind, value))
    return tokens


def _unquote(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body,
                  flags=re.DOTALL)
