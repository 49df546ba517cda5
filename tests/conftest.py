"""Shared fixtures: every test layer gets fresh directories and free ports."""

from __future__ import annotations

pytest_plugins = ["tests.zookeeper_fixture"]
