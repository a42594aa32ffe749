"""The shape of a consumed record, as the services use it.

aiokafka ships without type information; this Protocol names the attributes Mirrorline
relies on so that the data path is type-checked all the same. Offset, timestamp, key,
value and headers are the pure core's `Comparable` (what a tail match compares); a
consumed record adds where it came from.
"""

from __future__ import annotations

from typing import Protocol

from mirrorline.core.tail_match import Comparable


class Record(Comparable, Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...
