"""Spark's Python workers import PySpark's compiled modules, not `pyspark.zip`: Spark puts
its archives first on every worker's path, and modules imported from a zip are compiled
again in every process (0.5-1.5 s of CPU each). Real interpreters, the installed PySpark
and its real archives; no Spark is started (the executor's Spark tests run the workers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest
from mirrorline_spark.executor.driver import WORKER_PATH

ARCHIVE = Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip"


def _imported_from(pythonpath: list[str], cwd: Path, code: str = "") -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    out = subprocess.run([sys.executable, "-c", f"{code}import pyspark; print(pyspark.__file__)"],
                         env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.skipif(not ARCHIVE.exists(), reason="this PySpark ships no pyspark.zip")
def test_workers_import_the_installed_pyspark_rather_than_its_archive(tmp_path: Path) -> None:
    # As Spark starts a worker: its archive first, then what the driver's environment had.
    assert _imported_from([str(ARCHIVE)], tmp_path).startswith(str(ARCHIVE))
    assert _imported_from([str(ARCHIVE), WORKER_PATH], tmp_path) == pyspark.__file__
    # Off the path altogether: PySpark's worker clears the import caches before every
    # task, and an archive's importer would read its whole directory again each time.
    gone = ("import sys; assert not [p for p in [*sys.path, *sys.path_importer_cache]"
            " if 'pyspark.zip' in p], sys.path; ")
    assert _imported_from([str(ARCHIVE), WORKER_PATH], tmp_path, gone) == pyspark.__file__


def test_a_sitecustomize_of_the_interpreters_own_still_runs(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.OWN_SITE = True\n")
    code = "import builtins; print(getattr(builtins, 'OWN_SITE', False)); "
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([WORKER_PATH, str(own)])}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_the_task_daemon_preloads_its_modules_without_starting_a_thread(tmp_path: Path) -> None:
    """Spark's daemon forks task workers: a thread started by an import before the fork
    would be missing in every worker."""
    code = ("import sys, threading\n"
            "from mirrorline_spark.workerdaemon import PRELOAD, preload\n"
            "preload()\n"
            "assert all(name in sys.modules for name in PRELOAD)\n"
            "print(threading.active_count())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1"
