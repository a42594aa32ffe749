"""Reading the operator's configuration file: the thin I/O side of `mirrorline.core.config`.

`core/` takes text and lookups and touches neither the file system nor the environment;
this module reads the file, and hands the config providers (`${env:...}`, `${file:...}`,
`${dir:...}`) the process environment and the file system.
"""

from __future__ import annotations

import os
from pathlib import Path

from mirrorline.core.config import ProviderLookups, decode_config
from mirrorline.core.config import parse_config as _parse_config
from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import MirrorSettings

__all__ = ["host_lookups", "load_config", "parse_config"]


def _variable(name: str) -> str | None:
    return os.environ.get(name)


def _read_file(path: str) -> bytes:
    return Path(path).read_bytes()


def _is_file(path: str) -> bool:
    return Path(path).is_file()


def _absolute(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def host_lookups() -> ProviderLookups:
    """This process's environment and file system, for the config providers."""
    return ProviderLookups(variable=_variable, read_file=_read_file, is_file=_is_file,
                           absolute=_absolute)


def parse_config(text: str, *, source: str | None = None) -> MirrorSettings:
    """`mirrorline.core.config.parse_config` with the host's providers."""
    return _parse_config(text, source=source, lookups=host_lookups())


def load_config(path: str | os.PathLike[str]) -> MirrorSettings:
    """Read and resolve the MM2 properties file at `path`."""
    name = os.fspath(path)
    try:
        data = Path(name).read_bytes()
    except OSError as e:
        raise ConfigError(None, f"cannot read the configuration file: {e.strerror or e}",
                          source=name) from None
    return parse_config(decode_config(data), source=name)
