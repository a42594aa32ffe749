"""Errors shared by the pure core and the services."""

from __future__ import annotations

#: Most characters of an input that a message quotes; a longer input is cut, with its length.
MAX_QUOTED = 200


def quoted(text: str, limit: int = MAX_QUOTED) -> str:
    """`repr(text)` for a message: control and bidi characters escaped by `repr`, and an
    oversized input cut to `limit` characters with a note of its full length."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


class ConfigError(ValueError):
    """A configuration problem, always naming the offending key (and line when known).

    The CLI prints ``str(error)`` and exits with status 2 before anything starts.
    """

    def __init__(self, key: str | None, message: str, *, line: int | None = None,
                 source: str | None = None) -> None:
        self.key = key
        self.message = message
        self.line = line
        self.source = source
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.source is not None:
            where = self.source
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        elif self.line is not None:
            where = f"line {self.line}: "
        key = f"{self.key}: " if self.key else ""
        return f"{where}{key}{self.message}"


class WireFormatError(ValueError):
    """A record on an MM2 internal topic does not decode with the MM2 schema."""


class ListenError(OSError):
    """A listener (gRPC, /metrics) cannot bind its address: the address is in use or not
    this host's. The CLI prints the message, one line naming the address, and exits with
    status 2 (as for a configuration error: retrying would not help)."""


#: Longest reason `one_line` gives: a status field or a log line, never a flood.
ONE_LINE_MAX = 400


def one_line(exc: BaseException) -> str:
    """Why something failed, in one short line: a configuration error's own text (it
    names the key), otherwise the exception's type and the first line of its message --
    enough for a log line or a status field; the traceback belongs at DEBUG."""
    if isinstance(exc, ConfigError):
        text = str(exc)
    else:
        message = str(exc).strip()
        text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    text = text.splitlines()[0] if text else type(exc).__name__
    return text if len(text) <= ONE_LINE_MAX else text[:ONE_LINE_MAX - 3] + "..."
