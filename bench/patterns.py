"""`python -m bench.patterns`: pattern matching time, Python's backtracking `re` against
RE2 (what Mirrorline uses), on the patterns and names of issue 10.

For each case it reports the seconds of one `fullmatch`. Python's `re` is run only on
short names (its time doubles with each extra character: the long names would not finish);
RE2 runs on the short names and on names a hundred times longer. Topic names are at most
249 characters, group names are not bounded by Kafka.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from mirrorline.core.javaregex import compile_java

CASES: list[tuple[str, Callable[[int], str]]] = [
    ("(a+)+$", lambda n: "a" * n + "-x"),
    ("(.+)+@", lambda n: "mm2-offsets.primary.internal"[:n].ljust(n, "x")),
    ("(a|aa)+b", lambda n: "a" * n),
]


def _time(match: Callable[[str], object], name: str) -> float:
    start = time.perf_counter()
    match(name)
    return time.perf_counter() - start


def main() -> None:
    print(f"{'pattern':<12} {'name length':>11} {'python re (s)':>14} {'RE2 (s)':>10}")
    for pattern, make in CASES:
        backtracking = re.compile(pattern).fullmatch
        linear = compile_java(pattern).fullmatch
        for n in (16, 20, 24):
            name = make(n)
            print(f"{pattern:<12} {n:>11} {_time(backtracking, name):>14.4f} "
                  f"{_time(linear, name):>10.6f}")
        for n in (2_400, 100_000):
            print(f"{pattern:<12} {n:>11} {'(not run)':>14} {_time(linear, make(n)):>10.6f}")


if __name__ == "__main__":
    main()
