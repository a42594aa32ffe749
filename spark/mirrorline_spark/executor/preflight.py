"""Checks made before anything starts: each failure is a configuration error (exit 2)
naming what to fix -- the extra to install, the Java problem, the master URL, the
`--spark-conf` entry -- instead of a JVM stack trace minutes later."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Sequence

from mirrorline.core.errors import ConfigError

_MASTER = re.compile(r"^(local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|"
                     r"spark://[^/\s]+(:\d+)?(,[^/\s]+(:\d+)?)*|k8s://\S+|yarn)$")


def check_pyspark() -> None:
    missing = [m for m in ("pyspark", "pyarrow", "confluent_kafka")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(None, f"{', '.join(missing)} not installed: the Spark executor "
                                "needs the extra `pip install 'mirrorline[spark]'`")


def java_executable() -> str:
    """The `java` Spark will use: $JAVA_HOME/bin/java, else `java` on PATH (Java 17+)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise ConfigError(None, f"JAVA_HOME={home} has no executable bin/java: point "
                                    "JAVA_HOME at a Java 17+ installation (or unset it to use "
                                    "`java` on PATH)")
    else:
        found = shutil.which("java")
        if found is None:
            raise ConfigError(None, "no Java found: Spark needs Java 17 or later; install it "
                                    "and set JAVA_HOME (or put `java` on PATH)")
        java = found
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(None, f"cannot run {java}: {exc}") from None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None or out.returncode != 0:
        raise ConfigError(None, f"{java} -version failed: {(out.stderr or out.stdout).strip()}")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))
    if major < 17:
        raise ConfigError(None, f"{java} is Java {major}; Spark 4 needs Java 17 or later "
                                "(set JAVA_HOME)")
    return java


def check_master(master: str) -> str:
    if not _MASTER.match(master):
        raise ConfigError("--master", f"{master!r} is not a Spark master URL: use local[*], "
                                      "local[N], spark://HOST:PORT, k8s://https://HOST:PORT "
                                      "or yarn")
    return master


async def check_reachable(master: str, timeout: float = 5.0) -> None:
    """A standalone master must answer on its port before we start (clear error, exit 2)."""
    if not master.startswith("spark://"):
        return
    problems = []
    for hostport in master.removeprefix("spark://").split(","):
        host, _, port = hostport.rpartition(":")
        try:
            _, writer = await asyncio.wait_for(
                asyncio.open_connection(host or hostport, int(port or 7077)), timeout)
        except (OSError, TimeoutError, ValueError) as exc:
            problems.append(f"{hostport}: {exc or type(exc).__name__}")
            continue
        writer.close()
        return
    raise ConfigError("--master", f"Spark master {master} is unreachable ({'; '.join(problems)})")


def parse_spark_conf(entries: Sequence[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError("--spark-conf", f"{entry!r} is not KEY=VALUE")
        if not key.startswith("spark."):
            raise ConfigError("--spark-conf", f"{key!r} is not a Spark setting (they start "
                                              "with 'spark.')")
        if key == "spark.submit.deployMode" and value.strip() != "client":
            # The driver is this process: micro-batch commits reach its bookkeeping over a
            # Unix socket, so it cannot run elsewhere in the cluster.
            raise ConfigError("--spark-conf", f"spark.submit.deployMode={value.strip()} is "
                                              "not supported: the executor is the Spark "
                                              "driver itself (client mode)")
        conf[key] = value
    return conf
