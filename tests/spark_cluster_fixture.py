"""pytest plugin: a Spark standalone cluster (tests marked ``spark_cluster``).

Fixture ``spark_standalone`` (session scope): `odradek.spark.standalone.StandaloneCluster`, a
master and two workers (1 core, 1 GB each), separate JVMs from the PySpark wheel on free
loopback ports with their own work directories; at teardown every process group it started
(master, workers, their executors) is killed. Drivers run as processes of their own
(`python -m odradek.spark.pipeline --master <url>`), never in the test process, whose own
SparkContext (the ``spark`` fixture's) stays local.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.spark.standalone import StandaloneCluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark_standalone" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark_cluster)


@pytest.fixture(scope="session")
def spark_standalone() -> Iterator[StandaloneCluster]:
    sc = StandaloneCluster(workers=2).start()
    try:
        yield sc
    finally:
        sc.stop()
