"""`mirrorline spark-executor`: a worker of kind `spark` that copies the partitions the
controller hands it with one Structured Streaming query, whatever flows they belong to."""
