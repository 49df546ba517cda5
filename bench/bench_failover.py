"""Control-plane benchmark: leader failover, controlled shutdown and controller failover.

On an in-process 3-broker ``AsyncCluster`` (the three brokers, their controllers and this
script's observer all share ONE asyncio loop in ONE Python process, so every figure is
single-core Python work; the embedded coordination store has no network hop), with topics
totalling P partitions (1,000 and 10,000; topics of 1,000 partitions each):

1. **create**: one CreateTopics request (raw Kafka protocol) for all topics; times until its
   response, until every broker's metadata cache shows a leader for every partition, and until
   every replica exists in its broker's replica manager (the logs are created);
2. **kill**: ``kill_broker(v)`` on a non-controller broker ``v`` that leads ~1/3 of the
   partitions (session dropped at once, nothing flushed); times until every partition it led
   has a live leader in its state znode ``/brokers/topics/<t>/partitions/<p>/state``, until
   both surviving brokers' metadata caches show those leaders, and until ``v`` is out of every
   ISR;
3. **shutdown**: ``stop_broker(v)`` (controlled shutdown first, as SIGTERM does) on a
   non-controller broker leading ~1/3; the call's duration and the same leadership figures;
4. **failover**: ``kill_broker(c)`` on the controller; times until a new controller is elected
   (``/controller``), has loaded its context, and until every partition the old controller led
   has a live leader (state znodes and caches).

Each scenario runs on a fresh cluster in its own worker process (``bench_failover.py worker
...``, one JSON line on stdout), so the victim leads ~1/3 (there is no preferred-leader election
to restore leadership) and a stuck teardown cannot stall the run. State znodes are observed
through data watches of a separate store session (event-driven, no polling); caches are polled
every 5 ms. Controller-side spans come from wrapping ``KafkaController`` methods in the worker
(no change to src/).

``--zookeeper`` repeats the ``--zk-partitions`` (1,000) scenarios against a real ZooKeeper
(Debian's, started with ``odradek.coordination.zk_server``; brokers connect through kazoo).
Unless ``--no-profile``, each scenario at the largest P runs once more under
``py-spy record --nonblocking --idle`` (separate runs, so the sampler does not perturb the
measured ones) and the report summarises where the loop's time went.

    python bench/bench_failover.py                     # 1,000 and 10,000 partitions, markdown
    python bench/bench_failover.py --partitions 1000 --repeats 1 --no-profile   # quick
    python bench/bench_failover.py --zookeeper --splice-into docs/performance.md
    python bench/bench_failover.py splice SECTION.md docs/performance.md   # (run_all.sh)

The section goes between ``<!-- failover:begin -->`` and ``<!-- failover:end -->`` (appended
at the end if absent); the hand-written ``failover-notes`` block inside it is carried over.
Progress goes to stderr. Every wait is bounded (``--timeout`` per phase, three times that per
worker); workers are killed and temporary directories removed also on errors.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import gc
import json
import logging
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import collapsed_stacks, fmt_int, machine_facts, progress, table
from plots import failover_chart, figure

from odradek.cluster import AsyncCluster
from odradek.coordination import paths
from odradek.coordination.store import CoordinationStore, WatchEvent

TOPIC_SIZE = 1000  # partitions per topic


# -- instrumentation: controller-side spans ------------------------------------------------------
@dataclass
class Span:
    label: str
    broker_id: int
    t0: float
    t1: float


SPANS: list[Span] = []
GC_PAUSES: list[tuple[float, float, int]] = []  # (start, duration, generation)
_gc_start: list[float] = []


def _gc_callback(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_start.append(time.perf_counter())
    elif _gc_start:
        t0 = _gc_start.pop()
        GC_PAUSES.append((t0, time.perf_counter() - t0, info.get("generation", -1)))


def gc_in(t0: float, t1: float) -> tuple[float, float, int]:
    """(seconds in all collections, seconds in generation-2 ones, how many of those)."""
    inside = [(d, g) for s, d, g in GC_PAUSES if t0 <= s <= t1]
    return (sum(d for d, _ in inside), sum(d for d, g in inside if g == 2),
            sum(1 for _, g in inside if g == 2))


def instrument() -> None:
    """Wrap a few controller/broker coroutines to record when they ran (this process only)."""
    from odradek.controller.controller import KafkaController
    from odradek.server.broker import Broker

    def wrap(cls: type, name: str) -> None:
        orig = getattr(cls, name)
        if getattr(orig, "_bench_wrapped", False):
            return

        async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await orig(self, *args, **kwargs)
            finally:
                SPANS.append(Span(name, self.broker_id, t0, time.perf_counter()))
        wrapper._bench_wrapped = True  # type: ignore[attr-defined]
        setattr(cls, name, wrapper)

    for name in ("_on_broker_failure", "_on_controlled_shutdown", "_on_controller_failover",
                 "_load_context", "_on_topic_change", "_trigger_online_partitions"):
        wrap(KafkaController, name)
    wrap(Broker, "_controlled_shutdown")


def spans(label: str, after: float, broker_id: int | None = None) -> list[Span]:
    return [s for s in SPANS if s.label == label and s.t0 >= after
            and (broker_id is None or s.broker_id == broker_id)]


# -- the cluster under test ----------------------------------------------------------------------
def zk_zxid(connect: str | None) -> int | None:
    """The real ZooKeeper's last zxid (counter part), from its `srvr` four-letter word."""
    if not connect:
        return None
    from odradek.coordination.zk_server import four_letter_word

    host, _, rest = connect.partition(":")
    port = int(rest.split("/", 1)[0])
    try:
        text = four_letter_word(host, port, "srvr")
    except OSError:
        return None
    m = re.search(r"Zxid:\s*0x([0-9a-f]+)", text)
    return int(m.group(1), 16) & 0xFFFFFFFF if m else None


class Bench:
    """One fresh cluster: start, create topics, observe, tear down."""

    def __init__(self, partitions: int, rf: int, timeout: float, data_dir: Path,
                 connect: str | None) -> None:
        self.partitions = partitions
        self.rf = rf
        self.timeout = timeout
        self.dir = data_dir
        self.connect = connect
        overrides = {"zookeeper.connect": connect} if connect else {}
        self.cluster = AsyncCluster(3, data_dir=self.dir, overrides=overrides)
        self.observer: CoordinationStore | None = None
        self.tps: list[tuple[str, int]] = [
            (f"bench-{i // TOPIC_SIZE}", i % TOPIC_SIZE) for i in range(partitions)]
        self.topics = sorted({t for t, _ in self.tps})

    def zxid(self) -> int:
        z = zk_zxid(self.connect)
        return z if z is not None else self.cluster.zookeeper.last_zxid

    async def start(self) -> float:
        t0 = time.perf_counter()
        await asyncio.wait_for(self.cluster.start(), self.timeout)
        if self.connect:
            from odradek.coordination.zookeeper import ZooKeeperStore

            self.observer = ZooKeeperStore(self.connect)
        else:
            self.observer = self.cluster.zookeeper.client()
        await self.observer.start()
        return time.perf_counter() - t0

    # -- topic creation ---------------------------------------------------------------------------
    async def create_topics(self) -> dict[str, float]:
        import kio.index
        from kio.static.constants import EntityType

        from odradek.protocol.codec import decode_response, encode_request, response_class

        m = kio.index.load_payload_module(19, 7, EntityType.request)
        per_topic = Counter(t for t, _ in self.tps)
        req = m.CreateTopicsRequest(
            topics=tuple(m.CreatableTopic(name=t, num_partitions=per_topic[t],
                                          replication_factor=self.rf, assignments=(), configs=())
                         for t in self.topics),
            timeout=datetime.timedelta(seconds=self.timeout), validate_only=False)
        port = self.cluster.ports[self.cluster.controller_id()]
        brokers = list(self.cluster.brokers.values())
        expected_replicas = self.partitions * self.rf
        out: dict[str, float] = {}
        t0 = time.perf_counter()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(encode_request(req, 1, "bench-failover"))

            async def response() -> None:
                size = int.from_bytes(await reader.readexactly(4), "big")
                payload = await reader.readexactly(size)
                out["response"] = time.perf_counter() - t0
                _, resp = decode_response(response_class(type(req)), payload)
                bad = [(t.name, t.error_code, t.error_message) for t in resp.topics
                       if int(t.error_code) != 0]
                if bad:
                    raise RuntimeError(f"CreateTopics failed: {bad[:3]}")

            async def watch() -> None:
                while "caches" not in out or "replicas" not in out:
                    now = time.perf_counter() - t0
                    if "caches" not in out and all(_cache_has_leaders(b, self.tps)
                                                   for b in brokers):
                        out["caches"] = now
                    if "replicas" not in out and sum(
                            len(b.replica_manager.partitions) for b in brokers) \
                            >= expected_replicas:
                        out["replicas"] = now
                    await asyncio.sleep(0.05)
            await asyncio.wait_for(asyncio.gather(response(), watch()), self.timeout)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        return out

    async def settle(self, seconds: float) -> dict[str, Any]:
        """Let the controller's queue drain and the followers start fetching; report how many
        ISRs are not full (a loaded loop can make followers look lagging)."""
        for b in self.cluster.brokers.values():
            if b.started and b.controller is not None:
                await asyncio.wait_for(b.controller.wait_idle(), self.timeout)
        await asyncio.sleep(seconds)
        c = self.cluster.brokers[self.cluster.controller_id()].controller
        assert c is not None
        shrunk = sum(1 for tp in c.ctx.all_partitions()
                     if len((c.ctx.leader_and_isr(tp) or _NoIsr).isr) < self.rf)
        return {"isr_not_full": shrunk}

    def leaders(self) -> dict[tuple[str, int], int]:
        c = self.cluster.brokers[self.cluster.controller_id()].controller
        assert c is not None
        return {(tp.topic, tp.partition): la.leader for tp in c.ctx.all_partitions()
                if (la := c.ctx.leader_and_isr(tp)) is not None}


class _NoIsr:
    isr: tuple[int, ...] = ()


def _cache_has_leaders(broker: Any, tps: Iterable[tuple[str, int]]) -> bool:
    cache = broker.metadata_cache
    for t, p in tps:
        info = cache.partition(t, p)
        if info is None or info.leader < 0:
            return False
    return True


# -- observing a failure -----------------------------------------------------------------------
@dataclass
class Observation:
    t0: float
    victim: int
    led: set[tuple[str, int]]
    survivors: list[int]
    call: float = 0.0  # the kill/stop call's duration
    session_gone: float | None = None  # /brokers/ids/<victim> deleted (observer's watch)
    controller_znode: float | None = None  # /controller names a new broker
    new_controller: int = -1
    leader_times: dict[tuple[str, int], float] = field(default_factory=dict)
    isr_times: dict[tuple[str, int], float] = field(default_factory=dict)
    cache_first: float | None = None
    cache_all: float | None = None
    cpu: float = 0.0  # this process's CPU time
    runqueue: float = 0.0  # the loop's thread, runnable but waiting for a CPU
    zxid0: int = 0
    txns: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def rel(self, t: float | None) -> float | None:
        return None if t is None else t - self.t0

    @property
    def state_all(self) -> float | None:
        if len(self.leader_times) < len(self.led):
            return None
        return max(self.leader_times.values(), default=self.t0) - self.t0

    @property
    def state_first(self) -> float | None:
        return min(self.leader_times.values()) - self.t0 if self.leader_times else None


class Watcher:
    """Data watches on every partition state znode (through the observer session) and a
    children watch on /brokers/ids; records when each condition first held."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.handles: list[Any] = []
        self.obs: Observation | None = None
        self.done = asyncio.Event()
        self.live: set[int] = set()

    async def arm(self) -> None:
        store = self.bench.observer
        assert store is not None
        for t, p in self.bench.tps:
            tp = (t, p)
            self.handles.append(await store.watch_data(
                paths.partition_state_path(t, p),
                lambda ev, tp=tp: self._on_state(tp, ev)))
        self.handles.append(await store.watch_children(paths.BROKER_IDS, self._on_brokers))
        self.handles.append(await store.watch_data(paths.CONTROLLER, self._on_controller))

    def disarm(self) -> None:
        for h in self.handles:
            h.cancel()
        self.handles.clear()

    def begin(self, obs: Observation) -> None:
        self.obs = obs
        self.live = set(obs.survivors)
        self.done.clear()

    def _on_state(self, tp: tuple[str, int], ev: WatchEvent) -> None:
        obs = self.obs
        if obs is None or ev.data is None:
            return
        st = paths.decode_partition_state(ev.data)
        if st is None:
            return
        now = time.perf_counter()
        if tp in obs.led and tp not in obs.leader_times and st.leader in self.live:
            obs.leader_times[tp] = now
        if tp not in obs.isr_times and obs.victim not in st.isr:
            obs.isr_times[tp] = now

    def _on_brokers(self, ev: WatchEvent) -> None:
        obs = self.obs
        if obs is None or ev.children is None or obs.session_gone is not None:
            return
        if str(obs.victim) not in ev.children:
            obs.session_gone = time.perf_counter()

    def _on_controller(self, ev: WatchEvent) -> None:
        obs = self.obs
        if obs is None or ev.data is None or obs.controller_znode is not None:
            return
        reg = paths.decode_controller(ev.data)
        if reg is not None and reg.broker_id != obs.victim:
            obs.controller_znode = time.perf_counter()
            obs.new_controller = reg.broker_id


async def poll_caches(bench: Bench, obs: Observation, stop: asyncio.Event) -> None:
    brokers = [bench.cluster.brokers[i] for i in obs.survivors]
    pending = set(obs.led)
    live = set(obs.survivors)
    while pending and not stop.is_set():
        moved = set()
        for t, p in pending:
            if all((info := b.metadata_cache.partition(t, p)) is not None
                   and info.leader in live for b in brokers):
                moved.add((t, p))
        if moved:
            now = time.perf_counter()
            if obs.cache_first is None:
                obs.cache_first = now
            pending -= moved
            if not pending:
                obs.cache_all = now
                return
        await asyncio.sleep(0.005)


async def run_failure(bench: Bench, kind: str, isr_wait: float,
                      on_start: Callable[[], None] | None = None,
                      on_done: Callable[[], None] | None = None) -> Observation:
    """kind: kill (a non-controller), shutdown (a non-controller, stop_broker) or failover
    (kill the controller). `on_start` runs just before the call (the watches are armed),
    `on_done` once leaders are everywhere (before the wait for the ISRs)."""
    cluster = bench.cluster
    controller = cluster.controller_id()
    leaders = bench.leaders()
    counts = Counter(leaders.values())
    if kind == "failover":
        victim = controller
    else:  # the non-controller broker leading the most partitions (~1/3 each)
        victim = max((b for b in cluster.live_brokers() if b != controller),
                     key=lambda b: counts[b])
    led = {tp for tp, leader in leaders.items() if leader == victim}
    survivors = [b for b in cluster.live_brokers() if b != victim]
    watcher = Watcher(bench)
    progress(f"  arming {len(bench.tps):,} state-znode watches")
    await asyncio.wait_for(watcher.arm(), bench.timeout)
    await asyncio.sleep(0.2)  # initial deliveries drained
    gc.collect()
    if on_start is not None:
        on_start()
    obs = Observation(time.perf_counter(), victim, led, survivors)
    obs.extra["controller"] = controller
    obs.zxid0 = bench.zxid()
    watcher.begin(obs)
    cpu0 = time.process_time()
    sched0 = _schedstat()
    obs.t0 = time.perf_counter()
    stop_poll = asyncio.Event()
    poller = asyncio.create_task(poll_caches(bench, obs, stop_poll))
    progress(f"  {kind}: broker {victim} (controller {controller}) leads {len(led):,} "
             f"of {len(leaders):,} partitions")
    try:
        if kind == "shutdown":
            await asyncio.wait_for(cluster.stop_broker(victim), bench.timeout)
        else:
            await asyncio.wait_for(cluster.kill_broker(victim), bench.timeout)
        obs.call = time.perf_counter() - obs.t0

        deadline = time.perf_counter() + bench.timeout

        def finished() -> bool:
            base = obs.state_all is not None and obs.cache_all is not None
            if kind == "kill":
                return base and bool(spans("_on_broker_failure", obs.t0))
            if kind == "failover":
                return base and bool(spans("_on_controller_failover", obs.t0))
            return base
        while not finished():
            if time.perf_counter() > deadline:
                raise TimeoutError(
                    f"{kind}: after {bench.timeout:.0f} s, {len(obs.leader_times):,} of "
                    f"{len(led):,} state znodes and caches {'all' if obs.cache_all else 'not'}"
                    " moved")
            await asyncio.sleep(0.01)
        obs.cpu = time.process_time() - cpu0
        sched1 = _schedstat()
        obs.runqueue = (sched1[1] - sched0[1]) / 1e9
        obs.extra["loop_cpu"] = (sched1[0] - sched0[0]) / 1e9
        obs.extra["window"] = time.perf_counter() - obs.t0
        obs.extra["gc"] = gc_in(obs.t0, obs.t0 + obs.extra["window"])
        obs.txns = bench.zxid() - obs.zxid0
        if on_done is not None:
            on_done()
        # Out of every ISR: bounded separately (someone else than the controller may do it).
        isr_deadline = time.perf_counter() + isr_wait
        while len(obs.isr_times) < len(bench.tps) and time.perf_counter() < isr_deadline:
            await asyncio.sleep(0.05)
        obs.extra["isr_complete"] = len(obs.isr_times) >= len(bench.tps)
        obs.extra["isr_count"] = len(obs.isr_times)
    finally:
        stop_poll.set()
        poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await poller
        watcher.disarm()
    return obs


# -- py-spy ------------------------------------------------------------------------------------
def start_pyspy(root: Path, rate: int) -> tuple[subprocess.Popen[bytes] | None, Path]:
    """py-spy on this very process (the worker), sampling without pausing it."""
    out = root / f"pyspy-{time.monotonic_ns()}.txt"
    exe = shutil.which("py-spy")
    if exe is None:
        return None, out
    spy = subprocess.Popen([exe, "record", "--format", "raw", "--rate", str(rate),
                            "--nonblocking", "--idle", "--pid", str(os.getpid()),
                            "-o", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           start_new_session=True)
    time.sleep(1.0)  # attached; these samples (in start_pyspy) are dropped
    return spy, out


def stop_pyspy(spy: subprocess.Popen[bytes], out: Path, seconds: float, rate: int) -> str:
    spy.send_signal(signal.SIGINT)
    try:
        _, err = spy.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        spy.kill()
        _, err = spy.communicate()
    if not out.exists():
        return f"py-spy failed: {err.decode(errors='replace')[-300:]}"
    try:
        return summarise_profile(out, seconds, rate)
    finally:
        out.unlink(missing_ok=True)


IDLE_LEAVES = ("EpollSelector.select", "select", "poll", "epoll")

# Where a sample's time is charged: the innermost frame that matches one of these, from the
# leaf up (so json.dumps called by the store's journal counts as the store).
CATEGORIES: list[tuple[str, str]] = [
    ("logging/", "logging (state-change.log and other log records)"),
    ("odradek/common/state_change.py", "logging (state-change.log and other log records)"),
    ("odradek/coordination/embedded.py", "coordination store: embedded (tree, journal, watches)"),
    ("odradek/coordination/zookeeper.py", "coordination store: kazoo bridge"),
    ("kazoo/", "coordination store: kazoo bridge"),
    ("odradek/coordination/paths.py", "znode JSON encode/decode (coordination/paths.py)"),
    ("odradek/controller/channel.py", "controller requests: build + send (controller/channel.py)"),
    ("odradek/protocol/interbroker.py", "inter-broker encode/decode (protocol/interbroker.py)"),
    ("odradek/controller/", "controller logic (controller/*.py)"),
    ("odradek/server/replication/fetcher.py", "replica fetchers (server/replication/fetcher.py)"),
    ("odradek/server/apis/", "request handlers (server/apis/*.py)"),
    ("odradek/server/replication/replica_manager.py",
     "replica manager, partitions, purgatory checks"),
    ("odradek/server/replication/partition.py", "replica manager, partitions, purgatory checks"),
    ("odradek/runtime/purgatory.py", "replica manager, partitions, purgatory checks"),
    ("odradek/server/replication/isr.py", "ISR manager (server/replication/isr.py)"),
    ("odradek/storage/", "storage (logs, checkpoints)"),
    ("odradek/server/", "other broker code (server/*.py)"),
    ("odradek/protocol/", "protocol codec (protocol/*.py, kio)"),
    ("kio/", "protocol codec (protocol/*.py, kio)"),
    ("bench_failover.py", "this benchmark's observer"),
    ("asyncio/", "asyncio loop machinery"),
]


def _category(frames: list[str]) -> str:
    for f in reversed(frames):
        for needle, cat in CATEGORIES:
            if needle in f:
                return cat
    return "other"


def summarise_profile(raw: Path, seconds: float, rate: int, top: int = 10) -> str:
    selfc: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    cats: Counter[str] = Counter()
    total = idle = 0
    for frames, n in collapsed_stacks(raw):
        if any(f.startswith("start_pyspy ") for f in frames):
            continue  # waiting for py-spy to attach, before the window
        if not any("run_until_complete (" in f for f in frames):
            continue  # not the loop's thread (getaddrinfo's executor threads)
        total += n
        if frames[-1].split(" (")[0] in IDLE_LEAVES:
            idle += n
            continue
        selfc[frames[-1]] += n
        cats[_category(frames)] += n
        for f in set(frames):
            incl[f] += n
    busy = total - idle
    if busy <= 0:
        return "_no busy samples_"

    def short(f: str) -> str:
        name, _, file = f.partition(" (")
        file = file.rstrip(")")
        if "site-packages/" in file:
            file = file.split("site-packages/", 1)[1]
        elif "/lib/python3" in file:
            file = file.split("/lib/python3", 1)[1].split("/", 1)[-1]
        return f"`{name}` ({file})"

    fsync = sum(n for f, n in selfc.items()
                if f.split(" (")[0] in ("write_atomically", "fsync_dir"))
    lines = [f"{total:,} samples of the loop's thread over {seconds:.1f} s at {rate} Hz: "
             f"{idle / total:.0%} waiting in select (idle), {busy / total:.0%} busy, of which "
             f"{fsync / busy:.0%} in `write_atomically`/`fsync_dir` (checkpoint writes, "
             "mostly waiting for fsync).", ""]
    lines.append(table(["charged to (innermost matching frame)", "% of busy"],
                       [(c, f"{n / busy:.1%}") for c, n in cats.most_common(8)], "lr"))
    lines.append("")
    ours = [(f, c) for f, c in incl.most_common() if "odradek/" in f
            and not f.startswith("<module>") and "odradek/cluster/" not in f]
    lines.append(table(["odradek frame, inclusive", "% of busy"],
                       [(short(f), f"{c / busy:.1%}") for f, c in ours[:top]], "lr"))
    lines.append("")
    lines.append(table(["self (leaf) frame", "% of busy"],
                       [(short(f), f"{c / busy:.1%}") for f, c in selfc.most_common(6)], "lr"))
    return "\n".join(lines)


# -- one scenario on a fresh cluster (the worker process) ---------------------------------------
LABELS = {"kill": "_on_broker_failure", "shutdown": "_on_controlled_shutdown",
          "failover": "_on_controller_failover"}


async def scenario(a: argparse.Namespace) -> dict[str, Any]:
    """Start a cluster, create the topics, let it settle, inflict `a.kind`; return figures.
    Nothing is torn down: the worker exits at once and the parent removes its directory (a
    clean teardown of 30,000 replicas is slow, and see `worker` for the other reason)."""
    instrument()
    gc.callbacks.append(_gc_callback)
    bench = Bench(a.partitions, a.rf, a.timeout, Path(a.data_dir), a.connect)
    tag = f"[{'zookeeper' if a.connect else 'embedded'} P={a.partitions:,} RF={a.rf}] {a.kind}"
    progress(f"{tag}: starting 3 brokers (worker pid {os.getpid()})")
    out: dict[str, Any] = {"kind": a.kind, "partitions": a.partitions, "rf": a.rf,
                           "backend": "zookeeper" if a.connect else "embedded"}
    out["start"] = await bench.start()
    progress(f"  creating {len(bench.topics)} topic(s): {a.partitions:,} partitions, RF {a.rf}")
    out["create"] = await bench.create_topics()
    progress("  created: " + ", ".join(f"{k} {v:.1f} s" for k, v in out["create"].items()))
    out["settle"] = await bench.settle(a.settle)
    spy: list[Any] = []

    def spy_start() -> None:
        spy.extend(start_pyspy(Path(a.data_dir), a.rate))
        spy.append(time.perf_counter())

    def spy_stop() -> None:
        if spy and spy[0] is not None:
            out["profile"] = stop_pyspy(spy[0], spy[1], time.perf_counter() - spy[2], a.rate)

    out["loadavg"] = _loadavg()
    out["fsync_ms"] = _checkpoint_write_ms(Path(a.data_dir))
    obs = await run_failure(bench, a.kind, a.isr_wait, on_start=spy_start if a.profile else None,
                            on_done=spy_stop if a.profile else None)
    out.update(
        victim=obs.victim, controller=obs.extra["controller"], led=len(obs.led),
        call=obs.call, session_gone=obs.rel(obs.session_gone),
        controller_znode=obs.rel(obs.controller_znode), new_controller=obs.new_controller,
        state_first=obs.state_first, state_all=obs.state_all,
        cache_first=obs.rel(obs.cache_first), cache_all=obs.rel(obs.cache_all),
        isr_all=_isr_all(obs), isr_count=obs.extra["isr_count"], txns=obs.txns, cpu=obs.cpu,
        runqueue=obs.runqueue, loop_cpu=obs.extra["loop_cpu"], window=obs.extra["window"],
        gc=obs.extra["gc"][0], gc2=obs.extra["gc"][1], gc2_count=obs.extra["gc"][2])
    sp = spans(LABELS[a.kind], obs.t0)
    if sp:
        out["controller_span"] = sp[0].t1 - sp[0].t0
        out["controller_done"] = sp[0].t1 - obs.t0
    lc = spans("_load_context", obs.t0)
    if a.kind == "failover" and lc:
        out["load_context"] = lc[0].t1 - obs.t0
        out["load_context_span"] = lc[0].t1 - lc[0].t0
    cs = spans("_controlled_shutdown", obs.t0, obs.victim)
    if a.kind == "shutdown" and cs:
        out["cs_request"] = cs[0].t1 - cs[0].t0
    progress(f"  GC in the window: {out['gc']:.2f} s, of which {out['gc2_count']} full "
             f"collections {out['gc2']:.2f} s; {len(gc.get_objects()):,} objects tracked")
    progress(f"  {a.kind}: call {obs.call:.2f} s, state znodes all {_s(obs.state_all)}, "
             f"caches all {_s(obs.rel(obs.cache_all))}, controller event "
             f"{_s(out.get('controller_span'))}, victim out of {obs.extra['isr_count']:,}/"
             f"{a.partitions:,} ISRs ({_s(_isr_all(obs))})")
    return out


def _schedstat() -> tuple[int, int]:
    """(ns on a CPU, ns runnable but waiting for one) of the calling thread (the loop's)."""
    try:
        fields = Path("/proc/thread-self/schedstat").read_text().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return 0, 0


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _isr_all(obs: Observation) -> float | None:
    if not obs.extra.get("isr_complete"):
        return None
    return max(obs.isr_times.values()) - obs.t0


def _s(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f} s"


def worker(argv: list[str]) -> None:
    """`bench_failover.py worker ...`: one scenario in this process; one JSON line on stdout.

    It exits with os._exit right after printing, without stopping the brokers or the loop: on
    Python 3.11 a controller channel sender (controller/channel.py `_sender`) can swallow its
    cancellation in `asyncio.wait_for` and retry forever, so `ControllerChannelManager.shutdown`
    (and a broker's `kill()`/`stop()` waiting on it) may never return. The parent bounds this
    process anyway."""
    from odradek.server.gc_freeze import own_process

    own_process()  # a broker process of its own, as `odradek cluster` (server/gc_freeze.py)
    ap = argparse.ArgumentParser(prog="bench_failover.py worker")
    ap.add_argument("--kind", required=True, choices=sorted(LABELS))
    ap.add_argument("--partitions", type=int, required=True)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--connect", default=None)
    ap.add_argument("--settle", type=float, default=3.0)
    ap.add_argument("--isr-wait", type=float, default=40.0)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--rate", type=int, default=100)
    a = ap.parse_args(argv)
    _quiet_logging()
    with contextlib.suppress(ValueError, OSError):
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    code = 0
    # Not asyncio.run: its clean-up cancels every task and waits for them, and a sender task
    # that swallowed its cancellation never ends (see above). The process exits instead.
    loop = asyncio.new_event_loop()
    try:
        result = loop.run_until_complete(scenario(a))
    except BaseException as exc:  # reported to the parent
        result = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        code = 1
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _quiet_logging() -> None:
    # Warnings (fetchers reconnecting after a kill...) to stderr, one line each; the handler's
    # own level keeps state.change.logger's INFO records, which each broker writes to its
    # state-change.log as in production, off stderr.
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("    %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_RateLimit())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])


class _RateLimit(logging.Filter):
    """At most 5 records per logger (a killed broker makes fetchers warn per partition)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def filter(self, record: logging.LogRecord) -> bool:
        self.seen[record.name] += 1
        n = self.seen[record.name]
        if n == 6:
            record.msg, record.args = "(further %s warnings not shown)", (record.name,)
        return n <= 6


# -- the parent: run the workers -----------------------------------------------------------------
def checkpoint_write_times(directory: Path, n: int) -> list[float]:
    """What one checkpoint write costs here: odradek's `write_atomically` (write a small .tmp,
    fsync it, rename, fsync the directory), as a leader-epoch checkpoint is written."""
    from odradek.storage.checkpoints import write_atomically

    d = Path(tempfile.mkdtemp(prefix="fsync-", dir=directory))
    try:
        times = []
        for i in range(n):
            t0 = time.perf_counter()
            write_atomically(d / "leader-epoch-checkpoint", f"0\n1\n{i} 0\n".encode())
            times.append(time.perf_counter() - t0)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    return sorted(times)


def _checkpoint_write_ms(directory: Path) -> float:
    return statistics.median(checkpoint_write_times(directory, 50)) * 1000


def fsync_reference(directory: Path, n: int = 200) -> str:
    times = checkpoint_write_times(directory, n)
    return (f"median {statistics.median(times) * 1000:.2f} ms, p90 "
            f"{times[int(0.9 * n)] * 1000:.2f} ms")


def run_worker(a: argparse.Namespace, root: Path, kind: str, partitions: int, rf: int,
               connect: str | None, profile: bool = False) -> dict[str, Any]:
    data_dir = Path(tempfile.mkdtemp(prefix=f"{kind}-{partitions}-", dir=root))
    cmd = [sys.executable, str(Path(__file__).resolve()), "worker", "--kind", kind,
           "--partitions", str(partitions), "--rf", str(rf), "--data-dir", str(data_dir),
           "--settle", str(a.settle if partitions < 5000 else 2 * a.settle),
           "--isr-wait", str(a.isr_wait), "--timeout", str(a.timeout), "--rate", str(a.rate)]
    if connect:
        cmd += ["--connect", connect]
    if profile:
        cmd.append("--profile")
    base = {"kind": kind, "partitions": partitions, "rf": rf,
            "backend": "zookeeper" if connect else "embedded", "profiled": profile}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=None, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=a.timeout * 3)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {**base, "error": f"worker timed out after {a.timeout * 3:.0f} s"}
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything it left behind (py-spy)
        shutil.rmtree(data_dir, ignore_errors=True)
    lines = out.decode(errors="replace").strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        return {**base, "error": f"worker exited with {proc.returncode} and no result"}
    if "error" in result:
        progress(f"  FAILED: {result['error']}")
    return {**base, **result}


# -- report ---------------------------------------------------------------------------------------
WHAT = {"kill": "kill -9 a broker", "shutdown": "controlled shutdown (`stop_broker`)",
        "failover": "kill -9 the controller"}


def med(values: list[float | None], digits: int = 2) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    m = statistics.median(vals)
    s = f"{m:.{digits}f}"
    if len(vals) > 1:
        s += f" ({min(vals):.{digits}f}-{max(vals):.{digits}f})"
    if len(vals) < len(values):
        s += f"; {len(values) - len(vals)} missing"
    return s


def report(results: list[dict[str, Any]], a: argparse.Namespace, elapsed: float,
           facts: dict[str, str], notes: list[str]) -> str:
    w: list[str] = []
    cmd = "python bench/bench_failover.py" + (" " + " ".join(a.argv) if a.argv else "")
    w.append("## Control plane: failover and controlled shutdown (bench/bench_failover.py)\n")
    w.append(
        f"`{cmd}` on {facts['date']}: {facts['cpus'].split(' ')[0]} vCPUs ({facts['cpu model']}), "
        f"{facts['python']}, odradek {facts['odradek'].removeprefix('git ')}, load average at "
        f"start {facts['load average at start'].split(' (')[0]}. The whole run took "
        f"{int(elapsed) // 60} min {int(elapsed) % 60} s. One checkpoint write as the "
        "brokers do it (`storage/checkpoints.py` `write_atomically`: write a .tmp, fsync, "
        f"rename, fsync the directory) took {facts.get('fsync before', '?')} at the start and "
        f"{facts.get('fsync after', '?')} at the end, on the temp dir's filesystem.\n")
    w.append(
        "**Setup.** Each scenario runs on a fresh `AsyncCluster(3)` in its own worker process. "
        "The three brokers, their controllers and replica fetchers, and the benchmark's "
        "observer all share **one asyncio loop in that one process**, so at most one core does "
        "all the work. One CreateTopics request creates topics of 1,000 partitions each. The "
        "failure comes after the controller's queue has drained and the replicas have fetched "
        f"idly for {a.settle:g} s ({2 * a.settle:g} s at 10,000 partitions). The victim of "
        "*kill* and *shutdown* is the non-controller broker that leads the most partitions "
        "(about 1/3). Times run from the start of the `kill_broker`/`stop_broker` call:\n\n"
        "- *state znodes*: every partition the victim led has a live leader in "
        "`/brokers/topics/<t>/partitions/<p>/state`, seen through data watches of a separate "
        "store session;\n"
        "- *caches*: both surviving brokers' metadata caches show those leaders (polled every "
        "5 ms);\n"
        "- *controller event*: how long the controller's handler ran (`_on_broker_failure`, "
        "`_on_controlled_shutdown`). For the controller failover it is the time from the kill "
        "until the new controller finished `_on_controller_failover`: elected, context loaded, "
        "requests sent, elections written.\n\n"
        "Figures are medians, with the range when a scenario ran more than once. The "
        "observer's watch callbacks and cache polling run on the same loop and cost it a few "
        "percent (\"this benchmark's observer\" in the profiles).\n")
    if any(r["backend"] == "embedded" for r in results):
        w.append(
            "**Caveats.** The embedded store answers in-process, with no network hop. A real "
            "ZooKeeper adds a round trip, and a transaction-log fsync, to each of the "
            "controller's writes; the controller pipelines the state znode writes of one "
            "event, up to 100 in flight (`controller/pipeline.py`, as Kafka 1.1 does with "
            "ZooKeeper's asynchronous API; see the ZooKeeper rows, if present). Also, "
            "`kill_broker` closes the victim's session at once. After a real `kill -9` the "
            "session lives on until "
            "`zookeeper.session.timeout.ms` expires (18 s by default since Kafka 2.5, 6 s "
            "before), so in production these figures start only after that detection "
            "delay.\n")

    ok = [r for r in results if "error" not in r and not r.get("profiled")]
    groups: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for r in ok:
        groups.setdefault((r["kind"], r["backend"], r["partitions"], r["rf"]), []).append(r)
    rows = []
    for (kind, backend, p, rf), rs in sorted(groups.items(), key=lambda kv: (
            kv[0][1] != "embedded", kv[0][2], list(WHAT).index(kv[0][0]))):
        ctl = [r.get("controller_done") if kind == "failover" else r.get("controller_span")
               for r in rs]
        rows.append((
            WHAT[kind], backend, fmt_int(p), rf, fmt_int(statistics.median(r["led"] for r in rs)),
            len(rs), med([r["call"] for r in rs]), med(ctl),
            "**" + med([r["state_all"] for r in rs]) + "**",
            "**" + med([r["cache_all"] for r in rs]) + "**",
            med([r["isr_all"] for r in rs]),
            fmt_int(statistics.median(r["txns"] for r in rs)),
            " / ".join(f"{statistics.median(r.get(k) or 0.0 for r in rs):.2f}"
                       for k in ("window", "cpu", "runqueue", "gc"))))
    w.append(table(["scenario", "store", "partitions", "RF", "led by victim", "runs",
                    "call s", "controller event s", "state znodes s", "caches s",
                    "victim out of every ISR s", "store writes", "window / CPU / CPU wait / GC s"],
                   rows, "llrrrrrrrrrrr"))
    w.append("")
    caches = [(WHAT[k], b, p, statistics.median(v)) for (k, b, p, _), rs in groups.items()
              if (v := [r["cache_all"] for r in rs if r.get("cache_all") is not None])]
    if caches:  # the "caches s" column, drawn (bench/plots.py)
        w.append(figure("failover", failover_chart(sorted(
            caches, key=lambda c: (c[1] != "embedded", c[2], list(WHAT.values()).index(c[0])
                                   )))) + "\n")
    w.append(
        "Column notes:\n\n"
        "- *call*: `kill_broker` (in-process: sockets, fetchers and the session closed) or "
        "`stop_broker` (the ControlledShutdown request, then flush, checkpoints and close).\n"
        "- *window*: from the call until the benchmark saw both the caches and the "
        "controller event done (the loop may still be busy with the survivors' requests when "
        "the controller finishes).\n"
        "- *store writes*: coordination-store transactions in that window (the zxid's "
        "advance).\n"
        "- *CPU*: the worker's CPU time in the window. *CPU wait*: how long the loop's thread "
        "was runnable but waiting for a CPU held by other work on the machine "
        "(`/proc/thread-self/schedstat`). The rest of the window was spent blocked or idle "
        "(the checkpoint and log fsyncs run on the log managers' writer threads, whose CPU "
        "time counts in *CPU*). *GC*: time in the garbage collector (`gc.callbacks`), part "
        "of the CPU time.\n")

    w.append(NOTES_SLOT + "\n")
    rows = []
    for (kind, backend, p, _rf), rs in groups.items():
        for r in rs:
            t = []
            if r.get("session_gone") is not None:
                t.append(f"victim's `/brokers/ids` znode gone {r['session_gone']:.3f}")
            if kind == "failover":
                t.append(f"broker {r['new_controller']} in `/controller` "
                         f"{_v(r.get('controller_znode'), 3)}")
                t.append(f"its context loaded {_v(r.get('load_context'))} (reading it took "
                         f"{_v(r.get('load_context_span'))})")
            if kind == "shutdown":
                t.append(f"ControlledShutdown answered {_v(r.get('cs_request'))}")
            t.append(f"first led partition moved {_v(r['state_first'], 3)}, first in caches "
                     f"{_v(r['cache_first'], 3)}")
            if r.get("gc2_count"):
                t.append(f"{r['gc2_count']} full GC ({r['gc2']:.2f})")
            if r["isr_all"] is None:
                t.append(f"victim still in {p - r['isr_count']:,} ISRs {a.isr_wait:g} s after")
            c = r["create"]
            rows.append((WHAT[kind].split(" (")[0], backend, fmt_int(p), r.get("loadavg", "?"),
                         f"{r.get('fsync_ms', float('nan')):.2f}", f"{r['start']:.2f}",
                         f"{c.get('response', 0):.1f} / {c.get('caches', 0):.1f} / "
                         f"{c.get('replicas', 0):.1f}",
                         fmt_int(r["settle"]["isr_not_full"]), "; ".join(t) + " (s)"))
    w.append("Per run: the machine's load average just before the failure (other work "
             "shares the 2 vCPUs and the disk); the median of 50 checkpoint writes (see above) "
             "just before the failure; cluster start (s); topic creation (s), measured "
             "to the CreateTopics response / to every broker's cache showing all leaders / to "
             "every replica existing with its log; ISRs not full before the failure; and a "
             "finer timeline.\n")
    w.append(table(["scenario", "store", "partitions", "load avg", "checkpoint write ms",
                    "start", "create (response / caches / replicas)", "ISRs not full",
                    "timeline"], rows, "llrlrrrrl"))
    w.append("")
    failed = [r for r in results if "error" in r]
    for r in failed:
        notes.append(f"FAILED: {WHAT[r['kind']]}, {r['partitions']:,} partitions, RF "
                     f"{r['rf']} ({r['backend']}{', profiled' if r.get('profiled') else ''}): "
                     f"{r['error']}.")
    if notes:
        w.append("\n".join(f"- {n}" for n in notes) + "\n")
    profiled = [r for r in results if r.get("profiled") and "error" not in r]
    if profiled:
        w.append("### Where the time goes (py-spy)\n")
        w.append(f"`py-spy record --nonblocking --idle --rate {a.rate}` was attached to the "
                 "worker process in a separate run of each scenario, not the measured runs. "
                 "The window runs from the call until the caches and the controller event were "
                 "done. With `--idle`, time blocked in a system call such as fsync is sampled "
                 "too; py-spy otherwise drops samples of a thread that is not on a CPU. Only "
                 "the loop's thread is counted. One loop runs everything, so the first table "
                 "charges each busy sample to its innermost frame of a known kind. For example, "
                 "`json` called by the store's journal counts as the store. py-spy does not see "
                 "the garbage collector: a full collection (GC in each heading) is charged to "
                 "whichever frame was allocating when it started.\n")
        for r in profiled:
            ctl = r.get("controller_done" if r["kind"] == "failover" else "controller_span")
            w.append(f"#### {WHAT[r['kind']]}, {r['partitions']:,} partitions, RF {r['rf']} "
                     f"(this run: caches {_v(r['cache_all'])} s, controller event "
                     f"{_v(ctl)} s, GC {_v(r.get('gc'))} s)\n")
            w.append(r.get("profile") or "_no profile_")
            w.append("")
    return "\n".join(w).rstrip() + "\n"


def _v(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


# -- docs/performance.md ---------------------------------------------------------------------------
SECTION_RE = re.compile(r"<!-- failover:begin -->.*?<!-- failover:end -->", re.S)
NOTES_RE = re.compile(r"<!-- failover-notes:begin -->.*?<!-- failover-notes:end -->", re.S)
NOTES_SLOT = "<!-- failover-notes -->"
DEFAULT_NOTES = ("<!-- failover-notes:begin -->\n**Reading the numbers.** _Hand-written "
                 "commentary goes here; bench_failover.py keeps this block when it regenerates "
                 "the section._\n<!-- failover-notes:end -->")


def splice(section: str, doc: Path) -> None:
    """Put `section` between the failover markers of `doc` (appended at the end if absent),
    keeping the hand-written failover-notes block of the section it replaces; the rest of the
    file is left as it is."""
    old = doc.read_text() if doc.exists() else ""
    m = SECTION_RE.search(old)
    notes = NOTES_RE.search(m.group(0)) if m else None
    body = section.strip().replace(NOTES_SLOT, notes.group(0) if notes else DEFAULT_NOTES)
    block = f"<!-- failover:begin -->\n{body}\n<!-- failover:end -->"
    if m:
        new = old[:m.start()] + block + old[m.end():]
    else:
        new = (old.rstrip("\n") + "\n\n" if old.strip() else "") + block + "\n"
    doc.write_text(new)


# -- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        worker(argv[1:])
    if argv[:1] == ["splice"]:  # splice SECTION.md DOC.md (bench/run_all.sh)
        if len(argv) != 3:
            sys.exit("usage: bench_failover.py splice SECTION.md DOC.md")
        splice(Path(argv[1]).read_text(), Path(argv[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", default="1000,10000",
                    help="comma-separated partition totals (1000,10000)")
    ap.add_argument("--rf-large", type=int, default=3,
                    help="replication factor at 5,000 partitions and more (3)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of each scenario (3)")
    ap.add_argument("--scenarios", default="kill,shutdown,failover")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds of idle replication before the failure (doubled at 10k)")
    ap.add_argument("--isr-wait", type=float, default=40.0,
                    help="how long to wait for the victim to leave every ISR (40 s)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="bound of each phase of a scenario (600 s; the worker gets 3x)")
    ap.add_argument("--zookeeper", action="store_true",
                    help="also run the --zk-partitions scenarios against a real ZooKeeper")
    ap.add_argument("--zk-partitions", type=int, default=1000)
    ap.add_argument("--no-profile", action="store_true",
                    help="skip the py-spy runs (one extra run per scenario at the largest P)")
    ap.add_argument("--rate", type=int, default=100, help="py-spy sampling rate (100 Hz)")
    ap.add_argument("--output", help="write the markdown here instead of stdout")
    ap.add_argument("--splice-into", metavar="DOC",
                    help="also put the section between the failover markers of DOC (e.g. "
                         "docs/performance.md), keeping its hand-written notes")
    a = ap.parse_args(argv)
    hidden = ("--output", "--splice-into")
    a.argv = [x for i, x in enumerate(argv)
              if x not in hidden and not x.startswith(tuple(h + "=" for h in hidden))
              and (i == 0 or argv[i - 1] not in hidden)]
    a.partitions = [int(x) for x in a.partitions.split(",") if x]
    kinds = [k for k in LABELS if k in a.scenarios.split(",")]

    # run_all.sh's `timeout` sends SIGTERM: unwind, so the workers are killed and the temp dirs
    # removed by the finally clauses.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    facts = machine_facts()
    t0 = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="odradek-bench-failover-"))
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    zk = None
    try:
        facts["fsync before"] = fsync_reference(root)
        progress(f"checkpoint write (fsync file + dir) here: {facts['fsync before']}")
        for p in a.partitions:
            rf = a.rf_large if p >= 5000 else 3
            for kind in kinds:
                for _ in range(a.repeats):
                    results.append(run_worker(a, root, kind, p, rf, None))
        if a.zookeeper:
            from odradek.coordination.zk_server import ZooKeeperServer

            try:
                zk = ZooKeeperServer(data_dir=root / "zookeeper", tick_time=500).start()
                progress(f"ZooKeeper {zk.connect_string} (pid {zk.pid})")
            except Exception as exc:  # not installed, no java...
                notes.append(f"The real-ZooKeeper runs were skipped: {exc}.")
                zk = None
            if zk is not None:
                for i, kind in enumerate(kinds):
                    for j in range(a.repeats):
                        connect = f"{zk.connect_string}/bench-{i}-{j}"
                        results.append(run_worker(a, root, kind, a.zk_partitions, 3, connect))
        if not a.no_profile:
            if shutil.which("py-spy") is None:
                notes.append("py-spy is not installed (`pip install py-spy`): no profiles.")
            else:
                p = max(a.partitions)
                for kind in kinds:
                    results.append(run_worker(a, root, kind, p,
                                              a.rf_large if p >= 5000 else 3, None, True))
        facts["fsync after"] = fsync_reference(root)
        progress(f"checkpoint write (fsync file + dir) here: {facts['fsync after']}")
    finally:
        if zk is not None:
            zk.stop()
        shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - t0
    text = report(results, a, elapsed, facts, notes)
    if a.output:
        Path(a.output).write_text(text)
    elif not a.splice_into:
        sys.stdout.write(text.replace(NOTES_SLOT + "\n", ""))
    if a.splice_into:
        splice(text, Path(a.splice_into))
        progress(f"spliced into {a.splice_into}")
    progress(f"done in {elapsed:.0f} s")
    return 0 if any("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
