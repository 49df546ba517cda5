"""Moving long-lived objects out of the cyclic garbage collector's reach (docs/performance.md,
"GC and pure-Python decoding").

A broker holding 10,000 partitions tracks 1.5 million objects -- logs, segments, indexes,
partitions -- that live as long as it does; every full collection walked all of them again
(0.65-1.4 s pauses on the event loop during failovers). ``gc.freeze()`` moves every object
tracked so far to the permanent generation, which collections skip. It is worth it only for
many partitions (a freeze also keeps any garbage cycle present at that moment), so it happens:

* at start-up, after the logs are loaded, with a full collection first (nothing else runs yet);
* after a LeaderAndIsr request created that many partitions at once (no collection: the loop
  is serving requests).

The cyclic collector is also **paused** (:func:`paused_gc`) while a controller event or a
LeaderAndIsr / UpdateMetadata request is handled: at 10,000 partitions each allocates a few
hundred thousand objects that live until it ends, so generation-2 collections (~0.1 s each) came
in the middle of it, on the path from a broker's failure to the survivors' caches (two of them,
0.2 s of the controller's 0.75 s event). Reference counting still frees what is not cyclic; a
collection may run after the pause, when it no longer delays anyone.

Freezing and pausing, like the thread switch interval the checkpoint writer wants
(storage/checkpoint_writer.py), is process-wide state. A library must not change it in a
process it does not own — a user's test process embedding an ``odradek.Cluster`` — so both
happen only after :func:`own_process`, which the entry points that own their interpreter call
(elsewhere :func:`paused_gc` does nothing):
``odradek broker``, ``odradek standalone``, ``odradek cluster`` and the benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Iterator

log = logging.getLogger("odradek.gc")

FREEZE_MIN_PARTITIONS = 1000  # partitions loaded / created at once that are worth a freeze

_process_owned = False


def own_process() -> None:
    """This interpreter runs odradek alone: brokers may tune process-wide state (GC freezes,
    the thread switch interval)."""
    global _process_owned
    _process_owned = True


def process_owned() -> bool:
    return _process_owned


def should_freeze(new_partitions: int, threshold: int = FREEZE_MIN_PARTITIONS) -> bool:
    return new_partitions >= threshold


def freeze_long_lived(new_partitions: int, *, collect: bool, reason: str) -> bool:
    """``gc.freeze()`` (after ``gc.collect()`` with `collect`) if `new_partitions` is worth it
    and the process is odradek's own (:func:`own_process`)."""
    if not _process_owned or not should_freeze(new_partitions):
        return False
    if collect:
        gc.collect()
    gc.freeze()
    log.info("Froze %d objects after %s (%d partitions)", gc.get_freeze_count(), reason,
             new_partitions)
    return True


PAUSE_LIMIT_S = 5.0  # an awaiting pause (a controller event) re-enables the GC after this


@contextlib.contextmanager
def paused_gc(limit_s: float | None = PAUSE_LIMIT_S) -> Iterator[None]:
    """The cyclic garbage collector off for the block (a nested pause leaves it to the
    outermost), in odradek's own processes only (see the module doc). A block that awaits
    (a controller event stuck on an unreachable ZooKeeper) gets it back after `limit_s`."""
    if not _process_owned or not gc.isenabled():
        yield
        return
    gc.disable()
    timer: asyncio.TimerHandle | None = None
    if limit_s is not None:
        with contextlib.suppress(RuntimeError):  # (no running loop: a synchronous block)
            timer = asyncio.get_running_loop().call_later(limit_s, gc.enable)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        gc.enable()
