"""Kafka's config providers: `${NAME:path:key}` references resolved at load time.

Private helper of `mirrorline.core.config`. In Kubernetes, secrets reach MM2 as environment
variables or mounted files, and the properties file refers to them through the providers that
ship with Kafka:

    config.providers = env, file, dir
    config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider
    config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.dir.class = org.apache.kafka.common.config.provider.DirectoryConfigProvider
    us-east.sasl.jaas.config = ... password="${file:/etc/mm2/creds.properties:password}";
    us-east.ssl.key.password = ${env:KEY_PASSWORD}
    us-east.ssl.truststore.password = ${dir:/etc/mm2/secrets:truststore-password}

The reference syntax is Kafka's `ConfigTransformer` pattern; a provider is usable only when
`config.providers` lists its name and `config.providers.<name>.class` names its class (as in
Kafka). Where Kafka silently leaves an unresolvable reference in the value, this module raises
`ProviderError`: a literal `${env:X}` as a password only fails much later, at the broker.

Every resolved value is a secret: the caller hides any value that came out of a provider.

No I/O here (`core/` stays pure): the environment and the files come in through
`ProviderLookups`; `mirrorline.configfile` hands in the host's.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

import re2

from mirrorline.core.properties import last_wins, parse_properties

__all__ = ["NO_LOOKUPS", "PROVIDER_CLASSES", "ProviderError", "ProviderLookups", "Providers",
           "has_reference"]

_PACKAGE: Final = "org.apache.kafka.common.config.provider."
#: Provider classes that ship with Kafka -> the kind Mirrorline implements.
PROVIDER_CLASSES: Final[Mapping[str, str]] = {
    _PACKAGE + "EnvVarConfigProvider": "env",
    _PACKAGE + "FileConfigProvider": "file",
    _PACKAGE + "DirectoryConfigProvider": "directory",
}
# Kafka's ConfigTransformer.DEFAULT_PATTERN: provider, optional path, key. Matched by RE2:
# with a backtracking engine, a value such as "${" and thousands of ':' (which an Admin API
# caller can send as a flow property) takes minutes (the search is cubic).
_RE2_OPTIONS: Final = re2.Options()
_RE2_OPTIONS.log_errors = False
_REFERENCE: Final = re2.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}", options=_RE2_OPTIONS)


class ProviderError(ValueError):
    """A reference that cannot be resolved; `key` is the provider key at fault, if any."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


def _no_file(path: str) -> bytes:
    raise OSError(f"no files can be read here ({path})")


def _no_variable(name: str) -> str | None:
    return None


def _not_a_file(path: str) -> bool:
    return False


@dataclass(frozen=True)
class ProviderLookups:
    """Where providers look things up: the environment and the file system, as callables
    (the caller decides what they reach; the default reaches nothing). Kept with the
    settings (`MirrorSettings.lookups`): a flow composed later resolves the file's own
    references again. Module-level functions keep it picklable."""

    #: The value of an environment variable `${env:...}` names, or None when unset.
    variable: Callable[[str], str | None] = _no_variable
    #: The bytes of a file; raises OSError when it cannot be read.
    read_file: Callable[[str], bytes] = _no_file
    #: Whether a path names a regular file.
    is_file: Callable[[str], bool] = _not_a_file
    #: A path made absolute (against the working directory) and normalised.
    absolute: Callable[[str], str] = posixpath.normpath


#: No environment, no files: what a configuration that is not the operator's file gets.
NO_LOOKUPS: Final = ProviderLookups()


def has_reference(value: str) -> bool:
    return _REFERENCE.search(value) is not None


@dataclass(frozen=True)
class _Provider:
    name: str
    kind: str
    params: Mapping[str, str]


class Providers:
    """The providers a file declares; `resolve` replaces every reference in a value."""

    def __init__(self, top: Mapping[str, str], *,
                 lookups: ProviderLookups = NO_LOOKUPS) -> None:
        """`top`: the file's top-level keys (`config.providers*`) with their values."""
        self._lookups = lookups
        self._providers: dict[str, _Provider] = {}
        names = [n.strip() for n in top.get("config.providers", "").split(",") if n.strip()]
        for name in names:
            class_key = f"config.providers.{name}.class"
            cls = top.get(class_key, "").strip()
            if not cls:
                raise ProviderError(f"config.providers lists {name!r} but {class_key} is not "
                                    "set", "config.providers")
            kind = PROVIDER_CLASSES.get(cls)
            if kind is None:
                raise ProviderError(
                    f"unknown config provider class {cls!r}; Mirrorline runs Kafka's "
                    + ", ".join(PROVIDER_CLASSES), class_key)
            prefix = f"config.providers.{name}.param."
            params = {k[len(prefix):]: v.strip() for k, v in top.items()
                      if k.startswith(prefix)}
            self._providers[name] = _Provider(name, kind, params)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._providers)

    def resolve(self, value: str) -> tuple[str, list[str]]:
        """`value` with every reference replaced, and the replacement strings (secrets)."""
        secrets: list[str] = []

        def replace(match: re2._Match[str]) -> str:
            name, path, key = match.group(1), match.group(2), match.group(3)
            provider = self._providers.get(name)
            if provider is None:
                declared = ", ".join(self._providers) or "none"
                raise ProviderError(
                    f"refers to config provider {name!r}, which is not declared (declared: "
                    f"{declared}); add it to config.providers and set "
                    f"config.providers.{name}.class")
            resolved = _READERS[provider.kind](provider, path or "", key, self._lookups)
            secrets.append(resolved)
            return resolved

        return _REFERENCE.sub(replace, value), secrets


def _env(provider: _Provider, path: str, key: str, lookups: ProviderLookups) -> str:
    """EnvVarConfigProvider: `${env:VAR}`; no path; `allowlist.pattern` limits the names."""
    if path:
        raise ProviderError(f"${{{provider.name}:{path}:{key}}}: the environment provider "
                            f"takes no path; write ${{{provider.name}:{key}}}")
    allow = provider.params.get("allowlist.pattern")
    if allow is not None and re.fullmatch(allow, key) is None:
        raise ProviderError(f"environment variable {key!r} is not allowed by "
                            f"config.providers.{provider.name}.param.allowlist.pattern")
    value = lookups.variable(key)
    if value is None:
        raise ProviderError(f"environment variable {key!r} (${{{provider.name}:{key}}}) is "
                            "not set")
    return value


def _allowed(provider: _Provider, path: str, lookups: ProviderLookups) -> None:
    """Kafka's `allowed.paths` parameter: only files under these absolute paths."""
    allowed = provider.params.get("allowed.paths")
    if not allowed:
        return
    target = lookups.absolute(path)
    roots = [posixpath.normpath(p.strip()) for p in allowed.split(",") if p.strip()]
    relative = next((r for r in roots if not posixpath.isabs(r)), None)
    if relative is not None:  # as Kafka's AllowedPaths: every allowed path is absolute
        raise ProviderError(f"config.providers.{provider.name}.param.allowed.paths: "
                            f"{relative!r} is not an absolute path",
                            f"config.providers.{provider.name}.param.allowed.paths")
    if not any(target == r or target.startswith(r.rstrip("/") + "/") for r in roots):
        raise ProviderError(f"{path!r} is outside config.providers.{provider.name}.param."
                            f"allowed.paths ({allowed})")


def _file(provider: _Provider, path: str, key: str, lookups: ProviderLookups) -> str:
    """FileConfigProvider: `${file:/path/to/file.properties:key}` -- a key of a properties
    file, read with Java properties syntax."""
    if not path:
        raise ProviderError(f"${{{provider.name}::{key}}}: the file provider needs a path, "
                            f"e.g. ${{{provider.name}:/etc/mm2/secrets.properties:{key}}}")
    _allowed(provider, path, lookups)
    try:
        data = lookups.read_file(path)
    except OSError as e:
        raise ProviderError(f"cannot read {path} for ${{{provider.name}:...}}: "
                            f"{e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("iso-8859-1")
    entries = last_wins(parse_properties(text, source=path))
    if key not in entries:
        raise ProviderError(f"{path} has no key {key!r}")
    return entries[key].value


def _directory(provider: _Provider, path: str, key: str, lookups: ProviderLookups) -> str:
    """DirectoryConfigProvider: `${dir:/path/to/dir:name}` -- the whole content of the
    regular file `name` directly inside the directory (how Kubernetes mounts a secret)."""
    if not path:
        raise ProviderError(f"${{{provider.name}::{key}}}: the directory provider needs a "
                            f"directory, e.g. ${{{provider.name}:/etc/mm2/secrets:{key}}}")
    _allowed(provider, path, lookups)
    if "/" in key or key in ("", ".", ".."):
        raise ProviderError(f"{key!r} is not a file name inside {path}")
    file = posixpath.join(path, key)
    if not lookups.is_file(file):
        raise ProviderError(f"{file} is not a regular file")
    try:
        return lookups.read_file(file).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProviderError(f"cannot read {file}: {e}") from None


_READERS: Final[dict[str, Callable[[_Provider, str, str, ProviderLookups], str]]] = {
    "env": _env, "file": _file, "directory": _directory,
}
