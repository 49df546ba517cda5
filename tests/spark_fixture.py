"""pytest plugin: one local SparkSession for the whole test session (a session takes
6-13 s to start on a 2-core machine, so every Spark test shares it).

Fixture ``spark`` (session scope): ``local[2]``, UI off, bound to 127.0.0.1, workers running this
interpreter (so ``pyspark_odradek`` and ``odradek`` import on them). Tests that use it are marked
``spark`` automatically; the session is stopped at the end of the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from odradek.spark.session import local_session

    session = local_session("odradek-tests", 2, log_level="WARN")
    try:
        yield session
    finally:
        session.stop()
