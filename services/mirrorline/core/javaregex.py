"""Java regular expressions (as MM2's filters use them), matched in linear time.

Patterns are stored in the control log by API callers, and every service matches them
against every topic and group name: a backtracking engine would let one pattern such as
``(a+)+$`` stall the controller, the workers and the checkpointer for minutes on one
unlucky name. So every pattern is matched by RE2 (`google-re2`), whose time is linear in
the name's length whatever the pattern. Python's `re` still validates the pattern first
(its messages name the problem precisely). Constructs RE2 cannot run -- look-ahead and
look-behind, atomic groups ``(?>...)``, possessive quantifiers (``a*+``), back-references
(``\\1``, ``\\k<name>``), ``\\Z`` -- are refused with a message naming them: each is either
exponential in the worst case or needs a backtracking engine.

Python's :mod:`re` agrees with Java on the common subset; the differences are handled by
`_JavaRegexTranslator`, which either translates a construct to its Python equivalent or
rejects it (`JavaRegexIncompatible`, turned into a `ConfigError` naming the key by the
filters) -- never silently matches something else:

* compiled with :data:`re.ASCII`, because Java's ``\\d``, ``\\w``, ``\\s``, ``\\b`` and
  case-insensitive matching are ASCII-only by default;
* translated: named groups ``(?<name>...)`` -> ``(?P<name>...)``, back-references
  ``\\k<name>`` -> ``(?P=name)``, octal escapes ``\\0mnn`` -> ``\\xhh`` (Python reads at most
  two digits after ``\\0``), and inline flags ``(?i)`` anywhere in the pattern, which Python
  3.11 only allows at the very start.  Java applies such a flag to the rest of the enclosing
  group -- including later ``|`` alternatives, i.e. later list items -- so it becomes a scoped
  ``(?i:...)`` around each affected alternative;
* rejected: ``\\p{..}``/``\\P{..}``, ``\\Q..\\E``, ``\\h``/``\\H``, ``\\v``/``\\V`` (Python's
  ``\\v`` is a single character, Java's a class), ``\\R``, ``\\X``, ``\\z``, ``\\G``, ``\\e``,
  ``\\cX``, ``\\x{..}``, ``\\b{g}``, nested classes ``[a[b]]`` and intersections ``[a&&b]``
  (literal text to Python), a ``{`` that is not a ``{n}``/``{n,}``/``{n,m}`` quantifier
  (an error in Java, a literal in Python), the inline flags ``d``, ``u``, ``U``, ``x`` (no
  Python equivalent with identical semantics), and the Python-only forms ``(?P...)``,
  ``(?#...)``, ``(?(...)...)`` and ``\\U`` (which Java MM2 would refuse to start with).

Case-insensitive matching: Java folds ASCII letters only; RE2 also folds the Kelvin sign
and the long s into ``k`` and ``s``, so those two are neutralised in names matched against
a case-insensitive pattern, and a case-insensitive pattern with a non-ASCII cased letter
is refused.

Known residual difference: without ``(?s)`` Java's ``.`` also refuses ``\\r``, U+0085, U+2028
and U+2029, Python's only ``\\n``; topic names cannot contain these characters.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from dataclasses import dataclass, field
from typing import Final

import re2


class JavaRegexIncompatible(Exception):
    """A construct that is not valid, or not equivalent, in both regex dialects."""


class PatternTooLarge(JavaRegexIncompatible):
    """A pattern over `MAX_PATTERN_LENGTH` characters or `MAX_PATTERN_DEPTH` nested groups.

    Checked before anything parses the pattern: Python's parser recurses once per nested
    group, so a pattern nested a few hundred groups deep would raise RecursionError in
    every service that compiles it (the control log carries patterns to all of them).
    """


#: Most characters in one pattern (one item of a LIST property such as `topics`).
MAX_PATTERN_LENGTH: Final = 4_096
#: Most groups nested inside each other in one pattern (inline flags such as `(?i)`
#: count as one level each, since they become a scoped group).
MAX_PATTERN_DEPTH: Final = 32


_REJECTED_ESCAPES: Final = {
    "p": r"\p{...} (Unicode property class)",
    "P": r"\P{...} (negated Unicode property class)",
    "Q": r"\Q...\E (literal quoting; escape each special character instead)",
    "E": r"\E (end of literal quoting)",
    "h": r"\h (horizontal whitespace class)",
    "H": r"\H (non-horizontal-whitespace class)",
    "v": r"\v (Java: vertical whitespace class, Python: only U+000B)",
    "V": r"\V (non-vertical-whitespace class)",
    "R": r"\R (linebreak matcher)",
    "X": r"\X (grapheme cluster)",
    "z": r"\z (end of input)",
    "G": r"\G (end of previous match)",
    "e": r"\e (escape character; write \x1b)",
    "c": r"\cX (control character; write \xhh)",
    "U": r"\U (Python-only; Java MM2 rejects it)",
}
_ALLOWED_FLAGS: Final = frozenset("ims")
_FLAG_HINT: Final = {
    "d": "UNIX_LINES",
    "u": "UNICODE_CASE",
    "U": "UNICODE_CHARACTER_CLASS",
    "x": "COMMENTS; Java and Python disagree on whitespace inside [...]",
}
_QUANTIFIER: Final = re.compile(r"\{\d+(?:,\d*)?\}")
_FLAG_GROUP: Final = re.compile(r"\(\?([A-Za-z]*)(?:-([A-Za-z]*))?([:)])")
_GROUP_NAME: Final = re.compile(r"([A-Za-z][A-Za-z0-9]*)>")
_OCTAL: Final = "01234567"


@dataclass
class _Frame:
    """One group level: scoped-flag wrappers currently open, and flags later alternatives get."""

    open_wrappers: int = 0
    sticky_flags: list[str] = field(default_factory=list)


class _JavaRegexTranslator:
    """Single pass over a Java pattern producing the equivalent Python pattern."""

    def __init__(self, pattern: str) -> None:
        self._p = pattern
        self._i = 0
        self._out: list[str] = []
        self._frames = [_Frame()]
        #: Groups open now, counting the scoped groups inline flags open.
        self._depth = 0
        #: Whether any part of the pattern matches case-insensitively.
        self.folds = False

    def translate(self) -> str:
        p = self._p
        while self._i < len(p):
            ch = p[self._i]
            if ch == "\\":
                self._escape(in_class=False)
            elif ch == "[":
                self._char_class()
            elif ch == "(":
                self._open_group()
            elif ch == ")":
                self._close_group()
            elif ch == "|":
                self._alternative()
            elif ch == "{":
                m = _QUANTIFIER.match(p, self._i)
                if m is None:
                    raise JavaRegexIncompatible(
                        f"'{{' at position {self._i} does not start a {{n}}, {{n,}} or {{n,m}} "
                        "quantifier (Java rejects it; escape it as \\{ -- and note that a "
                        "comma inside a pattern splits the list item)")
                self._emit(m.group(), m.end())
            else:
                self._emit(ch, self._i + 1)
        # The outermost level ends with the pattern: close its flag wrappers.  Unbalanced
        # parentheses are left for `re` to report.
        self._out.append(")" * self._frames[0].open_wrappers)
        return "".join(self._out)

    def _push(self) -> None:
        self._frames.append(_Frame())
        self._deeper(1)

    def _deeper(self, levels: int) -> None:
        self._depth += levels
        if self._depth > MAX_PATTERN_DEPTH:
            raise PatternTooLarge(
                f"it nests groups more than {MAX_PATTERN_DEPTH} deep (at position "
                f"{self._i}); at most {MAX_PATTERN_DEPTH} levels are allowed")

    def _emit(self, text: str, next_index: int) -> None:
        self._out.append(text)
        self._i = next_index

    def _escape(self, *, in_class: bool) -> None:
        p, i = self._p, self._i
        if i + 1 >= len(p):
            self._emit("\\", i + 1)  # trailing backslash: `re` reports it
            return
        c = p[i + 1]
        if c in _REJECTED_ESCAPES:
            raise JavaRegexIncompatible(
                f"it uses {_REJECTED_ESCAPES[c]}, which Java and Python's re "
                "do not read the same way")
        if c == "x" and p.startswith("{", i + 2):
            raise JavaRegexIncompatible(r"it uses \x{...}; write \xhh or \uhhhh instead")
        if c == "b" and p.startswith("{", i + 2):
            raise JavaRegexIncompatible(r"it uses \b{g} (grapheme boundary)")
        if c == "k" and not in_class:
            m = _GROUP_NAME.match(p, i + 3) if p.startswith("<", i + 2) else None
            if m is None:
                raise JavaRegexIncompatible(r"malformed named back-reference \k<name>")
            self._emit(f"(?P={m.group(1)})", m.end())
            return
        if c == "0":
            self._octal()
            return
        if c == "N" and p.startswith("{", i + 2):  # \N{NAME}: the character itself
            end = p.find("}", i + 3)
            if end != -1:
                try:
                    char = unicodedata.lookup(p[i + 3:end])
                except KeyError:
                    self._emit(p[i:end + 1], end + 1)  # `re` reports the unknown name
                    return
                self._emit(re.escape(char), end + 1)
                return
        if c == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", p[i + 2:i + 6]):
            self._emit(re.escape(chr(int(p[i + 2:i + 6], 16))), i + 6)  # RE2 has no \uXXXX
            return
        if c == "s" and not in_class:  # Java's \s includes \x0B; RE2's does not
            self._emit(r"[\t\n\x0b\f\r ]", i + 2)
            return
        if c == "s":
            self._emit(r"\t\n\x0b\f\r ", i + 2)
            return
        if c == "S" and not in_class:
            self._emit(r"[^\t\n\x0b\f\r ]", i + 2)
            return
        self._emit(p[i:i + 2], i + 2)

    def _octal(self) -> None:
        # Java: \0n, \0nn, or \0mnn with m <= 3.  Python stops after two digits, so emit \xhh.
        p, j = self._p, self._i + 2
        digits = ""
        while j < len(p) and p[j] in _OCTAL and len(digits) < 3:
            if len(digits) == 2 and digits[0] > "3":
                break
            digits += p[j]
            j += 1
        if not digits:
            raise JavaRegexIncompatible(r"\0 must be followed by an octal digit in Java")
        self._emit(f"\\x{int(digits, 8):02x}", j)

    def _char_class(self) -> None:
        p = self._p
        self._emit("[", self._i + 1)
        if p.startswith("^", self._i):
            self._emit("^", self._i + 1)
        if p.startswith("]", self._i):  # a leading ']' is literal in both dialects
            self._emit("]", self._i + 1)
        while self._i < len(p):
            ch = p[self._i]
            if ch == "\\":
                self._escape(in_class=True)
            elif ch == "[":
                raise JavaRegexIncompatible("it nests a character class ('[' inside [...]); Java "
                                    "reads that as a union, Python as a literal '['; "
                                    "escape it as \\[")
            elif ch == "&" and p.startswith("&&", self._i):
                raise JavaRegexIncompatible("it uses '&&' inside [...]; Java reads that as a class "
                                    "intersection, Python as literal characters")
            elif ch == "]":
                self._emit("]", self._i + 1)
                return
            else:
                self._emit(ch, self._i + 1)
        # Unterminated class: `re` reports it.

    def _open_group(self) -> None:
        p, i = self._p, self._i
        if not p.startswith("(?", i):
            self._push()
            self._emit("(", i + 1)
            return
        rest = p[i + 2:i + 4]
        if rest[:1] in (":", "=", "!", ">") or rest in ("<=", "<!"):
            size = 3 if rest[:1] != "<" else 4
            self._push()
            self._emit(p[i:i + size], i + size)
            return
        if rest[:1] == "<":
            m = _GROUP_NAME.match(p, i + 3)
            if m is None:
                raise JavaRegexIncompatible("malformed named group (?<name>...)")
            self._push()
            self._emit(f"(?P<{m.group(1)}>", m.end())
            return
        if rest[:1] in ("P", "#", "("):
            raise JavaRegexIncompatible(
                f"'(?{rest[:1]}' is Python-only syntax that Java MM2 rejects")
        m = _FLAG_GROUP.match(p, i)
        if m is None:
            self._emit("(?", i + 2)  # unknown construct: `re` reports it
            self._push()
            return
        on, off, end = m.group(1), m.group(2) or "", m.group(3)
        if "i" in on:
            self.folds = True
        for flag in on + off:
            if flag in _FLAG_HINT:
                raise JavaRegexIncompatible(f"inline flag '{flag}' ({_FLAG_HINT[flag]}) is not "
                                    "supported")
            if flag not in _ALLOWED_FLAGS:
                raise JavaRegexIncompatible(f"unknown inline flag '{flag}'")
        if not on and not off:
            raise JavaRegexIncompatible("empty inline flag group")
        scoped = f"(?{on}-{off}:" if off else f"(?{on}:"
        if end == ":":
            self._push()
            self._emit(scoped, m.end())
            return
        # "(?i)" changes the flags for the rest of the enclosing group.
        frame = self._frames[-1]
        frame.open_wrappers += 1
        frame.sticky_flags.append(scoped)
        self._deeper(1)
        self._emit(scoped, m.end())

    def _close_group(self) -> None:
        if len(self._frames) == 1:
            self._emit(")", self._i + 1)  # unbalanced: `re` reports it
            return
        frame = self._frames.pop()
        self._depth -= frame.open_wrappers + 1
        self._emit(")" * frame.open_wrappers + ")", self._i + 1)

    def _alternative(self) -> None:
        frame = self._frames[-1]
        text = ")" * frame.open_wrappers + "|" + "".join(frame.sticky_flags)
        self._deeper(len(frame.sticky_flags) - frame.open_wrappers)
        frame.open_wrappers = len(frame.sticky_flags)
        self._emit(text, self._i + 1)


#: Non-ASCII characters RE2 folds into ASCII letters (Java does not): the Kelvin sign and
#: the long s become U+FFFD, which no case-insensitive ASCII letter matches.
_FOLDS_TO_ASCII: Final = {0x212A: 0xFFFD, 0x017F: 0xFFFD}
_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False


class JavaPattern:
    """A compiled Java pattern; `fullmatch` runs in time linear in the name."""

    def __init__(self, pattern: str, compiled: re2._Regexp[str], folds: bool) -> None:
        self.pattern = pattern
        self._compiled = compiled
        self._folds = folds

    def fullmatch(self, name: str) -> object | None:
        if self._folds and not name.isascii():
            name = name.translate(_FOLDS_TO_ASCII)
        return self._compiled.fullmatch(name)

    def __repr__(self) -> str:
        return f"JavaPattern({self.pattern!r})"


def compile_java(pattern: str, *, bound_length: bool = True) -> JavaPattern:
    """Compile one Java pattern; raises `JavaRegexIncompatible` (`PatternTooLarge` over
    the bounds) or `re.error`. `bound_length=False` is for a list's items joined into
    one pattern, each item already held to the bound (their number is not bounded)."""
    if bound_length and len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternTooLarge(f"it is {len(pattern)} characters long; at most "
                              f"{MAX_PATTERN_LENGTH} are allowed")
    translator = _JavaRegexTranslator(pattern)
    translated = translator.translate()
    with warnings.catch_warnings():
        # Python warns about '--', '||', '~~' inside sets (possible future set operations);
        # Java reads them literally, as Python does today.
        warnings.simplefilter("ignore", FutureWarning)
        re.compile(translated, re.ASCII)  # precise messages for invalid patterns
    if translator.folds and any(not c.isascii() and c.lower() != c.upper()
                                for c in translated):
        raise JavaRegexIncompatible(
            "it matches a non-ASCII letter case-insensitively (Java folds ASCII only); "
            "list both cases explicitly, e.g. [\u00e9\u00c9]")
    try:
        compiled = re2.compile(translated, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(
            exc.args[0], bytes) else str(exc)
        raise JavaRegexIncompatible(
            f"it uses a construct that needs a backtracking matcher ({reason}); look-ahead, "
            "look-behind, atomic groups, possessive quantifiers, back-references and \\Z "
            "are refused because they can take exponential time") from None
    return JavaPattern(translated, compiled, translator.folds)
