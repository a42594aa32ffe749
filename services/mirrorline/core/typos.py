"""Which known name an unknown one was probably meant to be: "did you mean ...".

Pure. MM2 drops an unknown key silently, and a misspelt key is exactly that: with
`a->b.topcis = orders` the flow keeps the default `topics = .*` and mirrors every topic.
The configuration loader asks `close_matches` for the known keys an unknown key is nearly
equal to, and names them in its warning (and `config check` fails on it).

"Nearly equal" is the optimal-string-alignment distance (Levenshtein plus the swap of two
neighbouring characters, each counted as one edit), ignoring case: at most one edit, or
two for names of `LONG_NAME` characters or more, where two slips are as likely as one in a
short name and two different known keys are still far apart. A key that is a known key with
a different case is always a match.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = ["LONG_NAME", "MIN_NAME", "MIN_PREFIX", "allowed_edits", "close_matches",
           "edit_distance", "or_list"]

#: From this length on, two edits still count as "nearly equal".
LONG_NAME: Final = 20
#: Shorter names (one-letter cluster aliases) are too short to tell a typo from another name.
MIN_NAME: Final = 3
#: Shorter families (`ssl.`) are too short to guess from: any word of three letters is near.
MIN_PREFIX: Final = 5


def allowed_edits(word: str) -> int:
    """How many edits `word` may be away from a known name and still be a typo of it."""
    return 2 if len(word) >= LONG_NAME else 1


def edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal-string-alignment distance of `a` and `b`, or `limit + 1` once it exceeds
    `limit` (the search stops early: most pairs are far apart)."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            best = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost)
            if (i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]):
                best = min(best, previous2[j - 2] + 1)
            current[j] = best
        if min(current) > limit:
            return limit + 1
        previous2, previous = previous, current
    return min(previous[len(b)], limit + 1)


def close_matches(word: str, exact: Iterable[str],
                  prefixes: Iterable[str] = ()) -> tuple[str, ...]:
    """The known names nearest to `word`, within `allowed_edits(word)`; empty if none.

    `exact` are whole names (`topics`); `prefixes` are families of names (`consumer.`,
    `primary.ssl.`), matched against the start of `word` up to one of its dots -- the rest
    of `word` is kept as written, so `consumr.fetch.min.bytes` suggests
    `consumer.fetch.min.bytes`; a family shorter than `MIN_PREFIX` is not guessed at.
    Several equally near names are all returned, sorted; `word` itself is never returned.
    """
    lowered = word.lower()
    limit = allowed_edits(word)
    found: dict[str, int] = {}
    for name in exact:
        distance = edit_distance(lowered, name.lower(), limit)
        if distance <= limit:
            found[name] = distance
    dots = [i + 1 for i, char in enumerate(word) if char == "."]
    for prefix in prefixes:
        if len(prefix) < MIN_PREFIX:  # `sql.url` is no typo of an `ssl.` key
            continue
        head_limit = allowed_edits(prefix)
        for cut in dots:
            if cut >= len(word):
                continue
            distance = edit_distance(lowered[:cut], prefix.lower(), head_limit)
            if distance <= head_limit:
                name = prefix + word[cut:]
                found[name] = min(distance, found.get(name, distance))
    found.pop(word, None)
    if not found:
        return ()
    nearest = min(found.values())
    return tuple(sorted(name for name, distance in found.items() if distance == nearest))


def or_list(names: Iterable[str]) -> str:
    """`a`, `a or b`, `a, b or c`: the names of a "did you mean" question."""
    items = list(names)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " or " + items[-1]
