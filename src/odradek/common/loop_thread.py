"""The synchronous faces' engine: an asyncio loop running in a daemon thread, with helpers to
run coroutines on it from the caller's thread. The synchronous clients (`odradek.client`'s
Producer, Consumer and Admin) and `odradek.Cluster` each run their async counterpart on one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result in the calling thread. A timeout
        cancels the coroutine and raises TimeoutError."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a synchronous client method was called from its own loop "
                               "(inside a callback): use the Async client there")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"timed out after {timeout}s") from None

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    @property
    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            if not self.in_loop_thread:
                self._thread.join(10)
        if not self._thread.is_alive() and not self.loop.is_closed():
            self.loop.close()
