"""Spark's Python workers import PySpark's compiled modules rather than its zip.

Spark puts `$SPARK_HOME/python/lib/pyspark.zip` (and py4j's zip and the spark-core jar)
first on the path of every Python process it starts. Python keeps no compiled bytecode
for modules it imports from a zip, so each of those processes -- a task's worker, and
the short-lived ones that plan a read, create a data source or commit a micro-batch --
compiled PySpark's sources again: 0.5-1.5 s of CPU per process, a third of all the
samples of a py-spy profile of the executor's processes (`zipimport._compile_source`).

The executor puts this folder on the `PYTHONPATH` its Spark driver inherits
(`mirrorline_spark.executor.driver`), so Python runs this module at the start of every
worker of a local master. Where PySpark and py4j are installed as packages (pip), their
modules are found outside the archives, with their bytecode, and the archives leave the
path: besides the compiling, PySpark's worker clears the import caches before every task,
which made each archive's importer read its whole directory again (the spark-core jar
holds thousands of entries; a fifth of a task worker's CPU). Where only the archives
carry PySpark, nothing changes. Then whatever
`sitecustomize` the interpreter would have run without this folder runs as well.

Only the standard library may be imported here: this runs before anything else.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_spark_archive(entry: str) -> bool:
    name = os.path.basename(entry)
    return entry.endswith((".zip", ".jar")) and name.startswith(("pyspark", "py4j",
                                                                 "spark-core"))


def _without_archives() -> None:
    rest = [p for p in sys.path if not _is_spark_archive(p)]
    if len(rest) < len(sys.path) and all(
            importlib.machinery.PathFinder.find_spec(name, rest) is not None
            for name in ("pyspark", "py4j")):
        sys.path[:] = rest
        # Importing this module already made an importer for each archive; a cached one
        # would still be asked to re-read its directory at every cache invalidation.
        for entry in [e for e in sys.path_importer_cache if _is_spark_archive(e)]:
            del sys.path_importer_cache[entry]


def _chain() -> None:
    """Run the `sitecustomize` this folder hides, if any."""
    later = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_without_archives()
_chain()
