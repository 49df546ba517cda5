"""Interop fixtures: a real `odradek broker` process, real Kafka clients against it.

`BrokerProcess` runs `odradek broker --override ...` as a subprocess, waits for its
`odradek broker <id> ready; bootstrap.servers=HOST:PORT` line (with a timeout), keeps its stderr
in a file that failure messages quote, and is always cleaned up (SIGTERM, then SIGKILL).
`stop()` is a clean shutdown (SIGTERM, exit status 0 expected); `kill()` is SIGKILL;
`restart()` starts it again on the same log dir (and on the same port when one was fixed).
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.processes import BrokerError, BrokerProcess  # noqa: F401  (re-exported)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_names = itertools.count()


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def _broker_ctx(workdir: Path, **kw: object) -> Iterator[BrokerProcess]:
    b = BrokerProcess(workdir, **kw)  # type: ignore[arg-type]
    try:
        b.start()
        yield b
    finally:
        b.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker shared by a module's tests (each test uses its own topics)."""
    with _broker_ctx(tmp_path_factory.mktemp("broker")) as b:
        yield b


@pytest.fixture
def broker_factory(tmp_path: Path, request: pytest.FixtureRequest
                   ) -> Iterator[Callable[..., BrokerProcess]]:
    """Fresh brokers for one test (restart/kill tests, special configs); all cleaned up."""
    made: list[BrokerProcess] = []
    request.node._interop_brokers = made

    def make(start: bool = True, **kw: object) -> BrokerProcess:
        b = BrokerProcess(tmp_path / f"broker{len(made)}", **kw)  # type: ignore[arg-type]
        made.append(b)
        if start:
            b.start()
        return b

    try:
        yield make
    finally:
        for b in made:
            b.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """A failed interop test shows the broker's stderr tail."""
    report = yield
    if report.failed and call.when in ("call", "setup"):
        brokers: list[BrokerProcess] = []
        funcargs = getattr(item, "funcargs", {})
        if isinstance(funcargs.get("broker"), BrokerProcess):
            brokers.append(funcargs["broker"])
        for b in getattr(item, "_interop_brokers", []):
            brokers.append(b)
        for b in brokers:
            report.sections.append((f"broker stderr {b.workdir.name}", b.tail(80)))
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """kafka-python 3.0.12 loads its protocol schemas with deprecated importlib.resources
    calls: hundreds of warnings that say nothing about odradek."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.filterwarnings(
                "ignore:(read|open)_text is deprecated:DeprecationWarning"))
