"""The chaos kit on a plain install (no ``chaos`` extra): confluent-kafka cannot be imported, yet
`odradek --help` and `odradek chaos --help` work, and a run says ``pip install 'odradek[chaos]'``
instead of an ImportError traceback, before it starts anything.

Each case runs in a fresh interpreter whose import system refuses confluent_kafka (a meta path
finder raising ModuleNotFoundError, as a missing package does), so that a module-level import of
it anywhere the command reaches would show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# confluent_kafka unimportable, as when the package is not installed
BLOCKER = """
import sys


class NoConfluentKafka:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "confluent_kafka":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, NoConfluentKafka())
"""
# `python -c PLAIN_INSTALL MODULE ARGS...`: MODULE run as `python -m MODULE ARGS...` would be
PLAIN_INSTALL = BLOCKER + """
import runpy

module = sys.argv.pop(1)
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

HINT = "pip install 'odradek[chaos]'"


def plain_install(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PLAIN_INSTALL, module, *args],
                          capture_output=True, text=True, timeout=60)


def test_the_blocker_blocks() -> None:
    """confluent-kafka is installed here (the test extra); the blocker hides it."""
    done = subprocess.run([sys.executable, "-c", BLOCKER + "import confluent_kafka.admin\n"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'confluent_kafka'" in done.stderr


@pytest.mark.parametrize("args", [("--help",), ("chaos", "--help")])
def test_help_works_without_confluent_kafka(args: tuple[str, ...]) -> None:
    done = plain_install("odradek.cli", *args)
    assert done.returncode == 0, done.stderr
    assert "usage: odradek" in done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("run", [(), ("--transactions",), ("--network",), ("--disk",)])
def test_a_run_says_which_extra_to_install(tmp_path: Path, run: tuple[str, ...]) -> None:
    data = tmp_path / "run"
    done = plain_install("odradek.cli", "chaos", *run, "--duration", "1", "--data-dir", str(data))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("odradek chaos: ")
    assert HINT in done.stderr
    assert "Traceback" not in done.stderr
    assert not data.exists()  # refused before any directory, ZooKeeper or broker


def test_the_pipeline_process_says_which_extra_to_install() -> None:
    done = plain_install("odradek.chaos.scenarios.txn_pipeline", "--bootstrap", "127.0.0.1:1",
                         "--input", "in", "--output", "out", "--group", "g",
                         "--transactional-id", "t")
    assert done.returncode == 1
    assert HINT in done.stderr
    assert "Traceback" not in done.stderr
