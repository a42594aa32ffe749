"""The Spark driver's Java class-data archive: a faster session start, made once.

A local Spark driver JVM spends most of its start loading, parsing and verifying the
classes of a few hundred jars (about 12 s of CPU for a session and its first job on a
2-core machine). A dynamic class-data-sharing archive (JDK 13+, `-XX:ArchiveClassesAtExit`
then `-XX:SharedArchiveFile`) maps them ready-made instead and about halves that (see the
driver's defaults in docs/spark.md). The driver uses the archive when one was made for
this Java and this PySpark (`driver_java_options`). `make_archive` (also
`python -m mirrorline_spark.executor.classdata`; the test suite calls it before its first
Spark test) makes it once, from a throwaway local session in a child process, into a
temporary file moved into place whole, so a concurrent reader sees no archive or a
complete one. The JVM checks an archive against its own build and class path and ignores
one that does not fit, silently. `MIRRORLINE_SPARK_CDS=0` turns the archive off (neither
made nor used).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: `0` turns the driver's class-data archive off (neither made nor used).
CDS_ENV = "MIRRORLINE_SPARK_CDS"
_MODULE = "mirrorline_spark.executor.classdata"


def enabled() -> bool:
    return os.environ.get(CDS_ENV, "1").strip() != "0"


def _java() -> Path | None:
    """The java binary spark-submit runs (JAVA_HOME's, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found else None


def archive_path() -> Path | None:
    """Where the archive for this Java binary and this PySpark lives (None: no Java)."""
    import pyspark

    java = _java()
    if java is None:
        return None
    jars = Path(pyspark.__file__).parent / "jars"
    try:
        stamp = (f"{java}:{java.stat().st_mtime_ns}:{pyspark.__version__}:{jars}:"
                 f"{jars.stat().st_mtime_ns}")
    except OSError:
        return None
    key = hashlib.sha256(stamp.encode()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "mirrorline" / "cds" / f"spark-driver-{key}.jsa"


def driver_java_options(base: str) -> str:
    """`base`, mapping the driver's class-data archive when one was made."""
    if not enabled():
        return base
    path = archive_path()
    if path is None or not path.is_file():
        return base
    return f"{base} -XX:SharedArchiveFile={path} -Xlog:cds*=off"


def make_archive(timeout: float = 300.0) -> Path | None:
    """Make the archive unless it exists (blocking: a Spark session in a child process);
    return it, or None when it is off or could not be made (that only costs speed)."""
    path = archive_path() if enabled() else None
    if path is None or path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".spark-dump-", dir=path.parent))
    staged = work / "driver.jsa"
    try:
        done = subprocess.run([sys.executable, "-m", _MODULE, str(staged)],
                              capture_output=True, timeout=timeout, check=False)
        if done.returncode == 0 and staged.is_file():
            os.replace(staged, path)
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path if path.is_file() else None


def _dump(staged: Path) -> None:
    """Run what a driver runs at its start (a session, a job, a streaming query) in a JVM
    that writes its classes to `staged` at exit; return once that JVM exited."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from mirrorline_spark.executor.driver import DRIVER_JAVA_OPTIONS

    options = f"{DRIVER_JAVA_OPTIONS} -XX:ArchiveClassesAtExit={staged} -Xlog:cds*=off"
    spark = (SparkSession.builder.master("local[2]").appName("mirrorline-cds")
             .config("spark.driver.extraJavaOptions", options)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    gateway: Any = spark.sparkContext._gateway
    jvm = gateway.proc
    try:
        spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
        query = (spark.readStream.format("rate").load().writeStream.format("noop")
                 .trigger(once=True).start())
        query.awaitTermination(120)
    finally:
        spark.stop()
        # The gateway JVM exits when its stdin closes, writing the archive on the way out.
        jvm.stdin.close()
        jvm.wait(timeout=120)


if __name__ == "__main__":
    if len(sys.argv) == 2:
        _dump(Path(sys.argv[1]))
    else:
        print(make_archive() or "no archive (off, no Java, or it could not be made)")
