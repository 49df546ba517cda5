"""odradek on Spark (S-9): the `odradek` data source (Spark's Kafka source and sink, by format
name "odradek"; see `source`), its offset planning (`offsets`), the executors' range reader
(`reader`), the writer (`sink`) and a local SparkSession (`session`). Needs the project's
`spark` extra (pyspark, pyarrow, pandas).
"""
