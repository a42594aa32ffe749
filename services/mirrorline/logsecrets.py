"""Keep secrets out of every log line, whatever the log level.

At DEBUG aiokafka logs each request it sends and each response it receives, and the SASL
exchange is no exception: a PLAIN authentication request carries the password in clear
(`SaslAuthenticateRequest_v0(sasl_auth_bytes=b'\\x00user\\x00password')`), a SCRAM one the
client's proof. Other libraries may print a client's configuration. So one filter sits on
every handler `mirrorline.runtime.configure_logging` installs, and on each record it

- replaces any argument that is a SASL authentication request or response (Kafka's
  `SaslAuthenticate` messages: PLAIN's password, SCRAM's proofs) by its name alone, and
- replaces every known secret value (the passwords, JAAS configurations and keys of the
  properties file, every value a config provider resolved, the service token) by
  `[hidden]` in the formatted message and in the text of an exception.

Secrets are registered once the properties file is read (`register`); the SASL rule holds
from the start, before any file is read.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterable, Mapping

from mirrorline.core.config import redact

__all__ = ["SecretFilter", "install", "register", "register_config", "scrub"]

HIDDEN = "[hidden]"
#: Values shorter than this are not searched for: a one-letter "password" would blank
#: every log line containing that letter without protecting anything.
MIN_SECRET = 4

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()
#: Kafka protocol messages whose content is a credential (names as aiokafka spells them).
_SASL_MESSAGE = re.compile(r"^SaslAuthenticate(Request|Response)")
#: `password="..."` / `password='...'` / `password=...` inside a JAAS configuration.
_JAAS_VALUE = re.compile(r"""(?:password|secret|token)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s;]+))""",
                         re.I)


def _forms(secret: str) -> set[str]:
    """`secret` as it may appear in a log line: as is, and as Python shows it inside the
    repr of a str or bytes (escapes for quotes, backslashes, non-ASCII)."""
    forms = {secret, repr(secret)[1:-1], secret.encode("unicode_escape").decode("ascii")}
    with contextlib.suppress(UnicodeEncodeError):  # lone surrogates: plain forms cover it
        forms.add(repr(secret.encode())[2:-1])
    return {f for f in forms if len(f) >= MIN_SECRET}


def register(values: Iterable[str]) -> None:
    """Add secret values to hide from every later log line."""
    global _secrets
    found: set[str] = set()
    for value in values:
        found.update(_forms(value.strip()))
    with _lock:
        # Longest first: a secret containing another is replaced whole.
        _secrets = tuple(sorted(set(_secrets) | found, key=len, reverse=True))


def register_config(raw: Mapping[str, str], resolved: Iterable[str] = ()) -> None:
    """Register the secrets of a properties file: the values of its secret keys (and the
    passwords inside JAAS configurations) and every value a config provider resolved."""
    values = list(resolved)
    for key, value in raw.items():
        if redact(key, value) == value:
            continue
        values.append(value)
        for match in _JAAS_VALUE.finditer(value):
            values.append(next(g for g in match.groups() if g is not None))
    register(values)


def scrub(text: str) -> str:
    """`text` with every registered secret replaced by `[hidden]`."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, HIDDEN)
    return text


def _hide(arg: object) -> object:
    name = type(arg).__name__
    if _SASL_MESSAGE.match(name):
        return f"{name}({HIDDEN})"
    return arg


class SecretFilter(logging.Filter):
    """Rewrites each record so that no secret reaches a handler (never drops one)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            if isinstance(record.args, tuple):
                record.args = tuple(_hide(a) for a in record.args)
            elif isinstance(record.args, Mapping):
                record.args = {k: _hide(v) for k, v in record.args.items()}
            if _secrets:
                message = record.getMessage()
                clean = scrub(message)
                if clean != message:
                    record.msg, record.args = clean, ()
                if record.exc_info and not record.exc_text:
                    record.exc_text = logging.Formatter().formatException(record.exc_info)
                if record.exc_text:
                    record.exc_text = scrub(record.exc_text)
                if record.stack_info:
                    record.stack_info = scrub(record.stack_info)
        except Exception:  # a filter must never lose a log line; hide it whole instead
            record.msg, record.args, record.exc_info, record.exc_text = (
                f"(log line hidden: it could not be checked for secrets) {HIDDEN}", (), None,
                None)
        return True


_filter = SecretFilter()


def install(handlers: Iterable[logging.Handler] | None = None) -> None:
    """Put the filter on `handlers` (default: every handler of the root logger)."""
    for handler in (logging.getLogger().handlers if handlers is None else handlers):
        if _filter not in handler.filters:
            handler.addFilter(_filter)
