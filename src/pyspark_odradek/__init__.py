"""Spark finds this module by its name (`pyspark_<format>`) and registers `DefaultSource`, so
`spark.read.format("odradek")` works with no `spark.dataSource.register` call (S-9.1)."""

from odradek.spark.source import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
