"""Why a connection to a cluster failed, in words an operator can act on.

aiokafka raises the same `KafkaConnectionError("Unable to bootstrap from [...]")` whether
the port is closed, the TLS handshake failed or the broker refused the password; the real
cause only appears in its own log lines ('Unable connect to "host:port": <error>'), one
per attempt, at ERROR. Printing those floods the log, hiding them loses the cause.

So aiokafka's log records are captured here instead of printed (unless the log level is
DEBUG) and `explain()` turns a failure into one line: the error plus the most recent
cause aiokafka gave for one of the cluster's bootstrap servers, classified as
"connection refused", "TLS handshake failed", "authentication failed", "host not found"
or "timed out".
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
import time
from collections.abc import Iterable
from typing import Final

from mirrorline import logsecrets

#: (monotonic time, message) of aiokafka's recent warnings and errors.
_recent: collections.deque[tuple[float, str]] = collections.deque(maxlen=200)
#: Causes older than this say nothing about the failure being explained.
_FRESH_S: Final = 120.0

_CLASSES: Final = (
    (re.compile(r"authenticat|sasl|credential|password", re.I), "authentication failed"),
    (re.compile(r"ssl|tls|certificate|handshake", re.I), "TLS handshake failed"),
    (re.compile(r"refused|errno 111|connect call failed", re.I), "connection refused"),
    (re.compile(r"name or service not known|nodename nor servname|errno -[23]|"
                r"temporary failure in name resolution", re.I), "host not found"),
    (re.compile(r"timeout|timed out", re.I), "timed out"),
)

#: aiokafka's line for a connection closed without a reason (nothing after the colon), as
#: Apache Kafka's plaintext listener does on reading a TLS ClientHello as a request.
_DROPPED: Final = re.compile(r"unable connect to \S+:\s*$", re.I)



class _Recorder(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):  # a logging handler must never raise
            _recent.append((time.monotonic(), record.getMessage()))


_recorder = _Recorder(level=logging.WARNING)


def quiet_aiokafka(*, debug: bool = False) -> None:
    """Capture aiokafka's warnings and errors for `explain()`; print them only at DEBUG."""
    logger = logging.getLogger("aiokafka")
    logsecrets.install([_recorder])  # what it keeps may be shown in status and errors
    if _recorder not in logger.handlers:
        logger.addHandler(_recorder)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    logger.propagate = debug


def classify(text: str) -> str | None:
    """The kind of failure `text` (an error message) describes, if recognisable."""
    for pattern, kind in _CLASSES:
        if pattern.search(text):
            return kind
    return None


def explain(exc: BaseException, servers: str | Iterable[str] | None = None, *,
            protocol: str | None = None, since: float | None = None) -> str:
    """One line for a failed connection: the kind of failure first, then the detail.

    `servers` are the cluster's bootstrap servers; aiokafka's latest message about one of
    them gives the cause a generic "Unable to bootstrap" hides. `protocol` is the
    client's security protocol: a TLS client talking to a plaintext listener gets no
    answer (Tansu) or a closed connection (Apache Kafka), so a timeout or a connection
    dropped without a reason there most likely is a TLS handshake that never finished.
    `since` (a `time.monotonic()` value) ignores causes logged before the attempt began.
    """
    text = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError) and not str(exc):
        text = "timed out"
    # A timeout of our own making means aiokafka never failed: there is no cause to borrow.
    cause = None if isinstance(exc, TimeoutError) else _latest_cause(servers, since)
    if cause is not None and ("bootstrap" in text.lower() or classify(text) is None):
        text = cause
    kind = classify(text)
    if protocol in ("SSL", "SASL_SSL") and (
            kind == "timed out" or (kind is None and _DROPPED.search(text))):
        return (f"TLS handshake failed: {text.strip()} (security.protocol is {protocol}; a "
                "listener that does not speak TLS closes the connection or never answers "
                "the handshake)")
    return f"{kind}: {text}" if kind is not None and not text.startswith(kind) else text


def unreachable(alias: str | None, exc: BaseException,
                servers: str | Iterable[str] | None, *, role: str = "", purpose: str = "",
                protocol: str | None = None, since: float | None = None) -> str:
    """The one line every service and command gives for a cluster it cannot reach:

        [ROLE ]cluster 'ALIAS' unreachable[ PURPOSE]: KIND: DETAIL

    e.g. `source cluster 'a' unreachable for the canary: connection refused: Unable
    connect to 127.0.0.1:9092: [Errno 111] ...` -- who, what for, the kind of failure
    (`explain`) and the address. When the detail names none of `servers`, they follow it
    in parentheses; without an alias (a command given only an address) the cluster is
    `cluster at ADDRESS`. Callers add `; retrying in Ns` or what they do instead.
    """
    names = _names(servers)
    detail = explain(exc, servers, protocol=protocol, since=since)
    if alias:
        who = f"cluster {alias!r}"
        if names and not any(name in detail for name in names):
            detail += f" (bootstrap servers {', '.join(names)})"
    else:
        who = f"cluster at {', '.join(names) or 'an unknown address'}"
    return (f"{role + ' ' if role else ''}{who} unreachable{' ' + purpose if purpose else ''}"
            f": {detail}")


def _names(servers: str | Iterable[str] | None) -> list[str]:
    if servers is None:
        return []
    return [s.strip() for s in (servers.split(",") if isinstance(servers, str) else servers)
            if s.strip()]


def _latest_cause(servers: str | Iterable[str] | None, since: float | None) -> str | None:
    names = _names(servers)
    if not names:
        return None
    now = time.monotonic()
    for when, message in reversed(_recent):
        if now - when > _FRESH_S or (since is not None and when < since):
            break
        plain = message.replace('"', "")
        if any(name in plain for name in names):
            return plain
    return None
