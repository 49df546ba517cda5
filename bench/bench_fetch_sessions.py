"""Idle replication with and without fetch sessions (KIP-227), a quick figure for
docs/fetch-sessions.md.

Two brokers in one process (`AsyncCluster`), one topic of `--partitions` partitions with
replication factor 2 (each broker leads half and follows the other half), no traffic. For
`--seconds` the leaders' Fetch handler is watched: follower requests per second, the mean
request and response sizes on the wire (the response frames as sent; the requests re-encoded),
and the process CPU time per second (both brokers, one event loop). Run once with sessions
(`max.incremental.fetch.session.cache.slots=1000`) and once with the cache at 0 slots (every
fetch full, as before sessions)::

    python bench/bench_fetch_sessions.py                  # 2,000 partitions, 10 s each
    python bench/bench_fetch_sessions.py --partitions 500 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from odradek.client.admin import AsyncAdmin  # noqa: E402
from odradek.client.types import NewTopic  # noqa: E402
from odradek.cluster import AsyncCluster  # noqa: E402
from odradek.protocol.codec import encode_request  # noqa: E402


def _frame_size(parts: Any) -> int:
    return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.size
               for p in parts)


async def measure(partitions: int, seconds: float, slots: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as d:
        cluster = AsyncCluster(2, data_dir=d, http=False, overrides={
            "max.incremental.fetch.session.cache.slots": slots,
            "replica.fetch.wait.max.ms": 500})
        await cluster.start()
        try:
            admin = AsyncAdmin({"bootstrap.servers": cluster.bootstrap_servers})
            try:
                await admin.create_topics([NewTopic("idle", partitions, 2)], timeout=120)
            finally:
                await admin.close()
            await cluster.wait_for(lambda: all(
                sum(1 for f in b.replica_manager.fetcher_manager.fetchers.values()
                    for st in f.states.values() if not st.is_truncating)
                == partitions // 2 for b in cluster.brokers.values()),
                timeout=300, what="followers fetching")
            await asyncio.sleep(2)  # past the first (full) fetches
            stats = {"requests": 0, "request_bytes": 0, "response_bytes": 0}
            for b in cluster.brokers.values():
                apis = b.apis
                assert apis is not None
                handle = apis.handlers[1]

                def spy(header: Any, request: Any, conn: Any, handle: Any = handle) -> Any:
                    stats["requests"] += 1
                    stats["request_bytes"] += len(encode_request(request, 0, "x"))
                    out = handle(header, request, conn)
                    if not inspect.isawaitable(out):
                        stats["response_bytes"] += _frame_size(out)
                        return out

                    async def later() -> Any:
                        parts = await out
                        stats["response_bytes"] += _frame_size(parts)
                        return parts
                    return later()
                apis.handlers[1] = spy
            cpu0, t0 = time.process_time(), time.monotonic()
            await asyncio.sleep(seconds)
            cpu, elapsed = time.process_time() - cpu0, time.monotonic() - t0
            n = max(1, stats["requests"])
            return {"requests_per_s": stats["requests"] / elapsed,
                    "request_bytes": stats["request_bytes"] / n,
                    "response_bytes": stats["response_bytes"] / n,
                    "cpu_per_s": cpu / elapsed}
        finally:
            await cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    rows = []
    for label, slots in (("sessions (1000 slots)", 1000), ("no sessions (0 slots)", 0)):
        print(f"measuring {label} ...", file=sys.stderr)
        rows.append((label, asyncio.run(measure(args.partitions, args.seconds, slots))))
    load = os.getloadavg()
    print(f"{args.partitions} idle partitions, RF 2, 2 brokers in one process, "
          f"{args.seconds:g} s each; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, load {load[0]:.2f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print("| | follower fetches/s | request bytes | response bytes | CPU s/s (both brokers) |")
    print("|---|---:|---:|---:|---:|")
    for label, r in rows:
        print(f"| {label} | {r['requests_per_s']:.1f} | {r['request_bytes']:.0f} | "
              f"{r['response_bytes']:.0f} | {r['cpu_per_s']:.3f} |")


if __name__ == "__main__":
    main()
