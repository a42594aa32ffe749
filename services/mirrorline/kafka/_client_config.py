"""A Java client config being translated for aiokafka: typed reads that name the key, and
a record of which keys were read.

Every translator (`mirrorline.kafka.clients` and its SASL and TLS parts) reads through one
`ClientConfig`, so that whatever no translator read is reported as ignored -- by name,
never by value -- instead of silently having no effect.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

from mirrorline.core.errors import ConfigError

__all__ = ["ClientConfig", "Reader"]

INTEGER: Final = re.compile(r"[+-]?[0-9]+")

# Reads one Java value as its aiokafka value; raises ConfigError naming the key.
Reader = Callable[["ClientConfig", str], Any]


class ClientConfig:
    """A client config being translated; remembers which keys were consumed."""

    def __init__(self, cfg: Mapping[str, str]) -> None:
        self._values = {key: value.strip() for key, value in cfg.items()}
        self._used: set[str] = set()

    def get(self, key: str) -> str | None:
        self._used.add(key)
        return self._values.get(key)

    def consume(self, prefix: str) -> None:
        """Mark a whole family as handled (inactive settings are not 'ignored')."""
        self._used.update(k for k in self._values if k.startswith(prefix))

    def release(self, key: str) -> None:
        """Report `key` as ignored after all (it was read but cannot take effect)."""
        self._used.discard(key)

    def ignored(self) -> list[str]:
        return sorted(k for k in self._values if k not in self._used)

    def map(self, kwargs: dict[str, Any], table: Mapping[str, tuple[str, Reader]]) -> None:
        for key, (argument, reader) in table.items():
            if self.get(key) is not None:
                kwargs[argument] = reader(self, key)

    def text(self, key: str) -> str:
        return self._values[key]

    def count(self, key: str) -> int:
        return self._number(key, minimum=0)

    def positive(self, key: str) -> int:
        return self._number(key, minimum=1)

    def _number(self, key: str, *, minimum: int) -> int:
        value = self._values[key]
        if not INTEGER.fullmatch(value):
            raise ConfigError(key, f"invalid value {value!r}: must be a whole number")
        number = int(value)
        if number < minimum:
            raise ConfigError(key, f"invalid value {value!r}: must be at least {minimum}")
        return number

    def boolean(self, key: str) -> bool:
        value = self._values[key].lower()
        if value not in ("true", "false"):
            raise ConfigError(key, f"invalid value {self._values[key]!r}: must be true or false")
        return value == "true"
