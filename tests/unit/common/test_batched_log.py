"""Log handlers that write once per event-loop iteration (common/batched_log.py): every line
arrives, in order, by the end of the iteration that logged it; outside a loop at once; and
close/flush write what is pending."""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from pathlib import Path

from odradek.common.batched_log import BatchedFileHandler, BatchedStreamHandler


def _logger(name: str, handler: logging.Handler) -> logging.Logger:
    handler.setFormatter(logging.Formatter("%(message)s"))
    log = logging.getLogger(name)
    log.propagate = False
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    return log


def test_lines_of_an_iteration_are_written_together_when_it_ends() -> None:
    out = io.StringIO()
    handler = BatchedStreamHandler(out)
    log = _logger("test.batched.stream", handler)

    async def body() -> None:
        for i in range(1000):
            log.info("line %d", i)
        assert out.getvalue() == ""  # still this iteration
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert out.getvalue().splitlines() == [f"line {i}" for i in range(1000)]
    try:
        asyncio.run(body())
    finally:
        log.removeHandler(handler)
        handler.close()


def test_outside_a_loop_and_from_threads_lines_are_written_at_once() -> None:
    out = io.StringIO()
    handler = BatchedStreamHandler(out)
    log = _logger("test.batched.thread", handler)
    try:
        log.info("first")
        assert out.getvalue() == "first\n"
        t = threading.Thread(target=log.info, args=("from a thread",))
        t.start()
        t.join()
        assert out.getvalue() == "first\nfrom a thread\n"
    finally:
        log.removeHandler(handler)
        handler.close()


def test_close_writes_what_is_pending(tmp_path: Path) -> None:
    path = tmp_path / "state-change.log"
    handler = BatchedFileHandler(path)
    log = _logger("test.batched.file", handler)

    async def body() -> None:
        log.info("a")
        log.info("b")
        handler.close()  # e.g. detach() while the loop runs
    try:
        asyncio.run(body())
    finally:
        log.removeHandler(handler)
    assert path.read_text() == "a\nb\n"
