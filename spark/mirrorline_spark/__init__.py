"""Mirrorline on Spark: a Kafka source and sink for PySpark Structured Streaming (Python
Data Source API, Arrow batches) and the `mirrorline spark-executor` service that runs
them for the partitions the controller hands it.

Importing this package does not import pyspark; `mirrorline_spark.source` and
`mirrorline_spark.sink` do (install the `mirrorline[spark]` extra).
"""

#: The format name both the source and the sink are registered under.
FORMAT = "mirrorline_kafka"
