"""Who is appending to a log (Kafka's ``AppendOrigin``), which decides what producer-state
checks a batch gets.

* ``CLIENT``: a producer's Produce request. Epoch and sequence are checked; control batches are
  refused.
* ``COORDINATOR``: the broker's own coordinators (the group coordinator's transactional offset
  commits, the transaction coordinator's markers through WriteTxnMarkers). The epoch is checked,
  sequences are not (their batches carry no sequence).
* ``REPLICATION``: a follower copying the leader. Nothing is refused; the state follows the
  batches.
"""

from __future__ import annotations

from enum import Enum


class AppendOrigin(Enum):
    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"
