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

Freezing, like the thread switch interval the checkpoint writer wants
(storage/checkpoint_writer.py), is process-wide state. A library must not change it in a
process it does not own — a user's test process embedding an ``odradek.Cluster`` — so both
happen only after :func:`own_process`, which the entry points that own their interpreter call:
``odradek broker``, ``odradek standalone``, ``odradek cluster`` and the benchmarks.
"""

from __future__ import annotations

import gc
import logging

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
