"""Permission checks on the files that hold a deployment's credentials.

- The admin tokens file (`mirrorline.admin.tokens.file`) decides who is admin: a file that
  the group or other users may write lets any of them make themselves admin at the next
  start. It is refused (a configuration error naming the key, its line and the file).
- Private keys and plaintext tokens (`mirrorline.grpc.tls.key`,
  `mirrorline.grpc.service.token.file`, each cluster's `ssl.keystore.location`) that the
  group or other users may read give one warning naming the file: tightening them is the
  operator's call (a key shared with a group on purpose is common in containers), but they
  should know.

Only the file's mode is looked at, never its content; a file that cannot be examined is
left to the code that reads it (which names the key when it cannot).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

from mirrorline.core.errors import ConfigError
from mirrorline.core.settings import ConfigWarning

__all__ = ["check_secret_files"]

TOKENS_KEY = "mirrorline.admin.tokens.file"
#: Keys naming a file whose content is a secret (exact keys, and key suffixes).
READ_PROTECTED = ("mirrorline.grpc.tls.key", "mirrorline.grpc.service.token.file")
READ_PROTECTED_SUFFIX = "ssl.keystore.location"


def _mode(path: str) -> int | None:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return None


def _who(mode: int, group_bit: int, other_bit: int) -> str:
    return " and ".join(w for w, bit in (("its group", group_bit), ("other users", other_bit))
                        if mode & bit)


def check_secret_files(raw: Mapping[str, str], lines: Mapping[str, int],
                       source: str | None) -> list[ConfigWarning]:
    """Refuse a tokens file the group or others may write (ConfigError); warn about each
    key or token file they may read."""
    tokens = raw.get(TOKENS_KEY, "").strip()
    if tokens:
        mode = _mode(tokens)
        if mode is not None and mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ConfigError(
                TOKENS_KEY, f"{tokens} is writable by {_who(mode, stat.S_IWGRP, stat.S_IWOTH)} "
                f"(mode {mode:04o}): whoever can write it can make themselves admin; "
                f"run `chmod go-w {tokens}`", line=lines.get(TOKENS_KEY), source=source)
    warnings: list[ConfigWarning] = []
    for key in sorted(raw):
        if key not in READ_PROTECTED and not key.endswith(READ_PROTECTED_SUFFIX):
            continue
        path = raw[key].strip()
        mode = _mode(path) if path else None
        if mode is not None and mode & (stat.S_IRGRP | stat.S_IROTH):
            warnings.append(ConfigWarning(
                key, f"{path} is readable by {_who(mode, stat.S_IRGRP, stat.S_IROTH)} "
                f"(mode {mode:04o}) and holds a secret; consider `chmod go-r {path}`",
                lines.get(key)))
    return warnings
