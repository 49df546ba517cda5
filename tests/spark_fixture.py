"""pytest plugin: one local SparkSession for the whole test session (FACTS.md: a session takes
6-13 s to start, so every Spark test shares it).

Fixture ``spark`` (session scope): ``local[2]``, UI off, bound to 127.0.0.1, workers running this
interpreter (so ``pyspark_odradek`` and ``odradek`` import on them). Tests that use it are marked
``spark`` automatically; the session is stopped at the end of the run.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    warehouse = tempfile.mkdtemp(prefix="odradek-spark-")
    session = (SparkSession.builder.master("local[2]").appName("odradek-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.warehouse.dir", warehouse)
               .config("spark.python.worker.reuse", "true")
               .getOrCreate())
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()
