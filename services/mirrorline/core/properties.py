"""A parser for Java `.properties` text, as `java.util.Properties.load` reads it.

MM2's dedicated mode reads its configuration with `Properties.load`, so operators' files use
the full Java syntax: `=`, `:` or plain whitespace between key and value, `#`/`!` comment
lines, backslash line continuations and backslash escapes (including `\\uXXXX`). A simpler
`key=value` splitter would silently mis-read perfectly valid MM2 files (an escaped `=` in a key,
a value continued over several lines, a key followed only by a space), so this module follows
the Java algorithm step by step.

Deliberately unlike `Properties`, duplicates are *kept*: `parse_properties` returns every
occurrence in file order, so the config loader can warn that an earlier value was overridden
while `last_wins` still gives Java's "last one wins" map.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mirrorline.core.errors import ConfigError

__all__ = ["Property", "duplicates", "last_wins", "parse_properties"]

# `Properties.load` treats exactly these as whitespace (not \r or \n, which end lines).
_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Property:
    """One `key = value` entry; `line` is the 1-based first physical line of its logical line."""

    key: str
    value: str
    line: int


def parse_properties(text: str, *, source: str | None = None) -> list[Property]:
    """Parse `.properties` text into every entry, in file order, duplicates included.

    `source` (a file name) only decorates error messages. A malformed `\\uXXXX` escape is the
    one syntax error Java reports; it raises `ConfigError` naming the line.
    """
    result: list[Property] = []
    for first_line, logical in _logical_lines(text):
        result.append(_parse_entry(logical, first_line, source))
    return result


def last_wins(entries: list[Property]) -> dict[str, Property]:
    """Java semantics: for a key given several times, the last occurrence is the value."""
    return {entry.key: entry for entry in entries}


def duplicates(entries: list[Property]) -> list[tuple[Property, Property]]:
    """Every (overridden, overriding) pair of consecutive occurrences of the same key."""
    seen: dict[str, Property] = {}
    pairs: list[tuple[Property, Property]] = []
    for entry in entries:
        earlier = seen.get(entry.key)
        if earlier is not None:
            pairs.append((earlier, entry))
        seen[entry.key] = entry
    return pairs


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join continued physical lines; drop blank and comment lines.

    Rules (from `Properties.LineReader`): leading whitespace of every physical line is skipped;
    a line whose first non-blank character is `#` or `!` is a comment *unless* it continues a
    previous line; a line ending in an odd number of backslashes continues on the next line
    (the backslash and the line break disappear). Escapes stay untouched here because the
    continuation test must count raw backslashes.
    """
    physical = _LINE_BREAK.split(text)
    logical: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(physical, start=1):
        stripped = raw.lstrip(_WHITESPACE)
        if not pending:
            if not stripped or stripped[0] in "#!":
                continue
            start = number
        if _continues(stripped):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        logical.append((start, "".join(pending)))
        pending = []
    if pending:
        # A continuation at end of input: Java returns what it has.
        logical.append((start, "".join(pending)))
    return logical


def _continues(line: str) -> bool:
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _parse_entry(logical: str, line: int, source: str | None) -> Property:
    """Split one logical line into key and value and decode both (`Properties.load0`)."""
    key_end = len(logical)
    value_start = len(logical)
    has_separator = False
    i = 0
    while i < len(logical):
        char = logical[i]
        if char == "\\":
            i += 2  # an escaped character never ends the key
            continue
        if char in _SEPARATORS:
            key_end, value_start, has_separator = i, i + 1, True
            break
        if char in _WHITESPACE:
            key_end, value_start = i, i + 1
            break
        i += 1
    # After the key: skip whitespace, then at most one `=`/`:` (only if the key ended at
    # whitespace), then whitespace again.
    while value_start < len(logical):
        char = logical[value_start]
        if char in _WHITESPACE:
            value_start += 1
        elif not has_separator and char in _SEPARATORS:
            has_separator = True
            value_start += 1
        else:
            break
    key = _unescape(logical[:key_end], line=line, source=source, key=None)
    value = _unescape(logical[value_start:], line=line, source=source, key=key)
    return Property(key, value, line)


def _unescape(text: str, *, line: int, source: str | None, key: str | None) -> str:
    """Decode backslash escapes: `\\t \\n \\r \\f`, `\\uXXXX`, and `\\x` -> `x` for any other x."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\":
            out.append(char)
            i += 1
            continue
        if i + 1 >= len(text):
            break  # a lone trailing backslash (only possible at end of input) vanishes
        escaped = text[i + 1]
        if escaped == "u":
            digits = text[i + 2:i + 6]
            if not _HEX4.fullmatch(digits):
                raise ConfigError(key, "malformed \\uXXXX escape (needs four hex digits)",
                                  line=line, source=source)
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
        i += 2
    decoded = "".join(out)
    if _SURROGATE.search(decoded):
        # Java strings are UTF-16, so `\uD83D\uDE00` is one character there; join such
        # pairs (lone surrogates survive unchanged, as in Java).
        decoded = decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return decoded


def format_property(key: str, value: str) -> str:
    """One `key = value` line that `parse_properties` reads back exactly as given."""
    return f"{_escape(key, key=True)} = {_escape(value, key=False)}"


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\f":
            out.append("\\f")
        elif ch == " " and (key or i == 0):
            out.append("\\ ")
        elif (ch in "=:" and key) or (ch in "#!" and (key or i == 0)):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or 0x7f <= ord(ch) <= 0x9f:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)
