"""pytest plugin: a Spark standalone cluster (tests marked ``spark_cluster``).

Fixture ``spark_standalone`` (session scope): `odradek.spark.standalone.StandaloneCluster`, a
master and two workers (2 cores, 1 GB each: two drivers with spark.cores.max=2 and 512 MB
executors get one executor on each worker), separate JVMs (`QUICK_START_JVM`) from the PySpark
wheel on free loopback ports with their own work directories; at teardown every process group
it started (master, workers, their executors) is killed and its directory (spark.local.dir, the
JVMs' java.io.tmpdir, the workers' work directories) removed. Drivers run as processes of their own
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


# The client compiler only and the serial collector: a Spark JVM (driver, executor, master,
# worker) starts with about 40% less CPU (a local driver and one small job: 16-19 s of CPU
# instead of 29-31 s on the shared 2-vCPU machine); its code runs slower, which these tests'
# small micro-batches do not notice. Not for benchmarks.
QUICK_START_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="session")
def spark_standalone() -> Iterator[StandaloneCluster]:
    sc = StandaloneCluster(workers=2, cores=2, jvm_options=QUICK_START_JVM).start()
    try:
        yield sc
    finally:
        sc.stop()
