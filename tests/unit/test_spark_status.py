"""`admin status` says why a Spark executor gave its partitions back."""

from __future__ import annotations

from mirrorline.cli.admin_format import format_status
from mirrorline.v1 import admin_pb2, spark_pb2


def test_status_names_the_executor_and_why_it_gave_its_partitions_back() -> None:
    problem = "Spark query mirrorline_spark_0 (flows a->b) failed: checkpoint gone"
    report = admin_pb2.StatusReport(spark_problems=[spark_pb2.SparkExecutorProblem(
        executor_id="spark:0", problem=problem)])
    assert format_status(report).splitlines()[-1] == (
        f"spark:0 gave its partitions back to the workers: {problem}")


def test_status_without_problems_says_nothing_about_spark() -> None:
    assert "spark" not in format_status(admin_pb2.StatusReport())
