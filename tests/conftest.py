"""Shared fixtures: every test layer gets fresh directories and free ports."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("tests.zookeeper_fixture")
pytest_plugins = ["tests.zookeeper_fixture", "tests.spark_fixture", "tests.spark_cluster_fixture"]


# pytest-xdist runs the suite on two workers (`-n 2 --dist loadgroup` in pyproject.toml). Each
# group below stays on one worker: the Spark session and the standalone Spark cluster are
# session fixtures (a worker of its own would start a second JVM for the same tests), the
# peers' suites share their fetched checkouts, and the chaos tests kill, pause and cut
# processes and namespaces with timings tuned for one such test at a time.
_GROUPS = (("spark_cluster", "spark_cluster"), ("spark", "spark"))
_DIRECTORY_GROUPS = ("peers", "chaos")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = next((g for marker, g in _GROUPS if item.get_closest_marker(marker)), None)
        if group is None:
            parts = item.path.parts
            group = next((d for d in _DIRECTORY_GROUPS
                          if "tests" in parts and d in parts[parts.index("tests"):]), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
