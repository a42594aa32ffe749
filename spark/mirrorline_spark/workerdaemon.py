"""Spark's Python worker daemon for the executor's tasks, with their modules imported once.

Spark starts a daemon per kind of Python worker and forks a process from it for each
worker it needs; the forked worker then imports its modules. For the executor's tasks
that is PySpark's worker and the copy task (`mirrorline_spark.copytask`: aiokafka, the
batch path, the configuration declarations), about a third of a task worker's CPU in a
py-spy profile of a 1 KiB bench run, paid again by every worker process. Set as
`spark.python.daemon.module` (`mirrorline_spark.executor.driver`), this daemon imports
them before it forks, so every worker starts with them, and collects garbage as the
services do (`mirrorline.runtime.tune_gc`).

Spark's own daemon imports the worker module after the fork because an import might
start a thread, and a forked child gets only the thread that forked it. None of these
imports starts one (`tests/unit/test_spark_workerpath.py` checks), so importing them
first is safe.
"""

from __future__ import annotations

#: Imported before the first fork: what every task worker of the executor imports.
PRELOAD = ("pyspark.worker", "pyspark.sql.worker.plan_data_source_read",
           "mirrorline_spark.source", "mirrorline_spark.sink", "mirrorline_spark.copytask")


def preload() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)


def main() -> None:
    preload()
    from mirrorline.runtime import tune_gc

    # As the services collect (fewer collections; what start-up made is frozen, so no
    # collection walks it, and the forked workers share its pages).
    tune_gc()
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
