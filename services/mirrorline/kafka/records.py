"""The shape of a consumed record, as the services use it.

aiokafka ships without type information; this Protocol names the attributes Mirrorline
relies on so that the data path is type-checked all the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Record(Protocol):
    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    @property
    def offset(self) -> int: ...

    @property
    def timestamp(self) -> int: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def value(self) -> bytes | None: ...

    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...
