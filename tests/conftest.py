"""Shared fixtures: every test layer gets fresh directories and free ports."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("tests.zookeeper_fixture")
pytest_plugins = ["tests.zookeeper_fixture", "tests.spark_fixture", "tests.spark_cluster_fixture"]
