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
            # The driver is this process: micro-batch commits reach its bookkeeping in
            # memory, so it cannot run elsewhere in the cluster.
            raise ConfigError("--spark-conf", f"spark.submit.deployMode={value.strip()} is "
                                              "not supported: the executor is the Spark "
                                              "driver itself (client mode)")
        conf[key] = value
    return conf


#: A master for which Spark makes the authentication secret itself (in memory, per
#: application): local mode, YARN and Kubernetes. A standalone cluster (and
#: local-cluster, its test form) shares one secret with its master and workers.
_OWN_SECRET = re.compile(r"^(local(\[[^\]]*\])?|yarn|k8s://\S+)$")
_WILDCARD = {"0.0.0.0", "::", "[::]", ""}


def _flag(conf: dict[str, str], key: str, default: bool) -> bool:
    value = conf.get(key)
    if value is None:
        return default
    value = value.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError("--spark-conf", f"{key} must be true or false, not {value!r}")
    return value == "true"


def network_conf(conf: dict[str, str], *, master: str, bind: str, tls: bool,
                 insecure: bool) -> dict[str, str]:
    """The Spark settings the driver runs with: `conf` (the operator's `--spark-conf`)
    plus where Spark listens and how it authenticates.

    Spark's driver RPC and the driver's block manager listen on `bind` (the service's
    `--bind`, `spark.driver.bindAddress`/`spark.driver.host`); the web UI is off
    (`spark.ui.enabled=false`) and, if turned on, cannot kill jobs and listens on
    loopback (`SparkDriver` sets SPARK_LOCAL_IP). When the deployment's gRPC uses TLS or
    `bind` is not loopback, Spark authenticates every connection with a secret of its
    own making (`spark.authenticate`) and encrypts RPC and local I/O; for a standalone
    master the cluster's shared secret must be given, or the executor refuses to start.
    An operator's explicit `spark.authenticate=false` there is refused unless
    `mirrorline.grpc.insecure = true`.
    """
    from mirrorline.core.security import is_loopback

    out = dict(conf)
    out.setdefault("spark.driver.bindAddress", bind)
    if bind.strip() not in _WILDCARD:
        out.setdefault("spark.driver.host", bind.strip("[]"))
    out.setdefault("spark.ui.enabled", "false")
    out.setdefault("spark.ui.killEnabled", "false")
    _flag(out, "spark.ui.enabled", False)
    if not tls and is_loopback(bind):
        return out
    why = ("the deployment's gRPC uses TLS" if tls
           else f"--bind {bind} is not a loopback address")
    for key in ("spark.authenticate", "spark.network.crypto.enabled"):
        if not _flag(out, key, True) and not insecure:
            raise ConfigError("--spark-conf", f"{key}=false is refused because {why}: "
                                              "Spark's ports would take unauthenticated "
                                              "connections (mirrorline.grpc.insecure = true "
                                              "accepts that)")
        out.setdefault(key, "true")
    out.setdefault("spark.io.encryption.enabled", "true")
    if (_flag(out, "spark.authenticate", True) and not _OWN_SECRET.match(master)
            and not out.get("spark.authenticate.secret")):
        raise ConfigError("--master", f"{master}: Spark must authenticate because {why}, "
                                      "and a standalone cluster needs its shared secret: "
                                      "give --spark-conf spark.authenticate.secret=... (the "
                                      "secret the master and workers use)")
    return out


def security_summary(conf: dict[str, str]) -> str:
    """What the log says about Spark's listeners and security (never a secret)."""
    auth = _flag(conf, "spark.authenticate", False)
    crypto = auth and _flag(conf, "spark.network.crypto.enabled", False)
    return (f"driver and block manager on {conf.get('spark.driver.bindAddress', '?')}, "
            f"authentication {'on' if auth else 'off'}, encryption {'on' if crypto else 'off'}")
