"""Prometheus for development and tests: Debian's `prometheus` package, unpacked per user.

The dashboards of `deploy/grafana/dashboards` are checked against a real Prometheus
(`tests/integration/test_dashboards.py`). Debian packages it (2.42 in bookworm), so the
suite uses that build, installed without root: `mirrorline dev prometheus install` fetches
the package's .deb and unpacks it into a per-version user cache folder
(`~/.cache/mirrorline/prometheus-<version>`), where nothing else of the system changes.

The .deb is fetched, in this order, by `apt-get download` (works without root wherever
apt's package lists exist), from the URL `apt-get --print-uris download` gives, and from
Debian's mirror at the pinned release below (lists missing: a bare CI image). Its
checksum is verified whenever apt or the pin names one. The archive is unpacked here
(a .deb is an `ar` archive holding a `data.tar.*`), so neither dpkg nor root is needed.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

#: The Debian release the suite was checked with (bookworm's; `apt-cache policy prometheus`).
DEBIAN_VERSION = "2.42.0+ds-5+deb12u1"
#: Where that release lives on Debian's mirror when apt has no lists, and its checksum.
PINNED_URL = ("http://deb.debian.org/debian/pool/main/p/prometheus/"
              "prometheus_2.42.0%2bds-5%2bdeb12u1_amd64.deb")
PINNED_SHA256 = "81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55"
PROMETHEUS_ENV = "MIRRORLINE_PROMETHEUS"
_COMPLETE = ".complete"
_BINARY = Path("usr/bin/prometheus")


class PrometheusNotInstalled(Exception):
    """Prometheus could not be found or installed; the message says why and what to do."""


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mirrorline"


def upstream_version(debian_version: str) -> str:
    """`2.42.0+ds-5+deb12u1` -> `2.42.0`: the folder name's version."""
    return re.split(r"[+~-]", debian_version.split(":")[-1], maxsplit=1)[0]


def home(version: str = DEBIAN_VERSION, cache: Path | None = None) -> Path:
    return (cache or cache_dir()) / f"prometheus-{upstream_version(version)}"


def binary(cache: Path | None = None) -> Path | None:
    """The prometheus executable to run: `$MIRRORLINE_PROMETHEUS`, else the newest complete
    install in the cache, else `prometheus` on PATH; None when there is none."""
    configured = os.environ.get(PROMETHEUS_ENV)
    if configured:
        return Path(configured) if Path(configured).is_file() else None
    installs = _installed(cache or cache_dir())
    if installs:
        return installs[-1] / _BINARY
    found = shutil.which("prometheus")
    return Path(found) if found else None


def _installed(cache: Path) -> list[Path]:
    """The complete installs in `cache`, oldest version first."""
    return sorted((p for p in cache.glob("prometheus-*")
                   if (p / _COMPLETE).is_file() and (p / _BINARY).is_file()),
                  key=lambda p: [int(n) if n.isdigit() else 0
                                 for n in p.name.removeprefix("prometheus-").split(".")])


def install(cache: Path | None = None) -> Path:
    """Install Debian's prometheus package into the cache; return the binary's path.

    Idempotent (with a complete install in the cache, nothing is fetched: remove its
    folder to take a newer package) and atomic (unpacked into a temporary folder, moved
    into place whole). Blocking: call it from a thread on an event loop.
    """
    cache = cache or cache_dir()
    installed = _installed(cache)
    if installed:
        return installed[-1] / _BINARY
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".prometheus-") as work:
        deb, version = _fetch(Path(work))
        target = home(version, cache)
        if (target / _COMPLETE).is_file() and (target / _BINARY).is_file():
            return target / _BINARY
        staged = Path(work) / "root"
        unpack_deb(deb, staged)
        if not (staged / _BINARY).is_file():
            raise PrometheusNotInstalled(f"{deb.name} holds no {_BINARY}")
        (staged / _COMPLETE).write_text(f"{version}\n")
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
    return target / _BINARY


def _fetch(work: Path) -> tuple[Path, str]:
    """(the .deb, its Debian version), by the first of the three ways that works."""
    problems: list[str] = []
    apt = shutil.which("apt-get")
    if apt is not None:
        done = subprocess.run([apt, "download", "prometheus"], cwd=work, capture_output=True,
                              text=True, check=False)
        debs = sorted(work.glob("prometheus_*.deb"))
        if done.returncode == 0 and debs:
            return debs[0], _deb_version(debs[0].name)
        problems.append(f"apt-get download: {_last_line(done.stderr)}")
        done = subprocess.run([apt, "--print-uris", "download", "prometheus"],
                              capture_output=True, text=True, check=False)
        found = re.search(r"'(\S+\.deb)' (prometheus_\S+\.deb) \d+ SHA256:([0-9a-f]{64})",
                          done.stdout)
        if found:
            url, name, sha256 = found.groups()
            try:
                return _download(url, work / name, sha256), _deb_version(name)
            except OSError as exc:
                problems.append(f"{url}: {exc}")
        else:
            problems.append(f"apt-get --print-uris: {_last_line(done.stderr) or 'no URL'}")
    try:
        name = f"prometheus_{DEBIAN_VERSION}_amd64.deb"
        return _download(PINNED_URL, work / name, PINNED_SHA256), DEBIAN_VERSION
    except OSError as exc:
        problems.append(f"{PINNED_URL}: {exc}")
    raise PrometheusNotInstalled("cannot fetch Debian's prometheus package: "
                                 + "; ".join(problems))


def _download(url: str, path: Path, sha256: str) -> Path:
    with urllib.request.urlopen(url, timeout=60) as response:
        data = response.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise OSError(f"checksum mismatch: sha256 {digest}, expected {sha256}")
    path.write_bytes(data)
    return path


def _deb_version(name: str) -> str:
    """`prometheus_2.42.0+ds-5+deb12u1_amd64.deb` (or its %-quoted form) -> the version."""
    return urllib.parse.unquote(name).split("_")[1]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def unpack_deb(deb: Path, into: Path) -> None:
    """Extract a .deb's files (its `data.tar.*` member) under `into`, as `dpkg-deb -x`."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise PrometheusNotInstalled(f"{deb.name} is not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = data[pos + 60:pos + 60 + size]
        if name.startswith("data.tar"):
            into.mkdir(parents=True, exist_ok=True)
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tar:
                _extract(tar, into)
            return
        pos += 60 + size + (size % 2)
    raise PrometheusNotInstalled(f"{deb.name} has no data.tar member")


def _extract(tar: tarfile.TarFile, into: Path) -> None:
    """Extract with tarfile's `data` filter where Python has it (3.11.4+); else refuse
    any member that would land outside `into` and extract the rest as plain files."""
    if hasattr(tarfile, "data_filter"):
        tar.extractall(into, filter="data")
        return
    root = into.resolve()
    for member in tar.getmembers():
        target = (into / member.name).resolve()
        if not (target == root or root in target.parents) or member.isdev():
            raise PrometheusNotInstalled(f"refusing {member.name!r} of the package")
        if member.issym() and Path(member.linkname).is_absolute():
            continue  # an absolute link points into the system, not the unpacked tree
        tar.extract(member, into)
