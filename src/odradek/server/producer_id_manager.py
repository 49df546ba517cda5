"""Producer id allocation (Kafka's ZK-era ProducerIdManager).

Brokers reserve blocks of 1000 ids by a version-checked write of `/latest_producer_id_block`
(`{"version":1,"broker":B,"block_start":"S","block_end":"E"}`), then hand ids out of their block
locally, so ids are unique cluster-wide and survive restarts.
"""

from __future__ import annotations

import json

from ..coordination.store import BadVersionError, CoordinationStore, NodeExistsError

PATH = "/latest_producer_id_block"
BLOCK_SIZE = 1000


def encode_block(broker_id: int, start: int, end: int) -> bytes:
    return json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                       "block_end": str(end)}, separators=(",", ":")).encode()


def decode_block(data: bytes) -> tuple[int, int]:
    obj = json.loads(data)
    return int(obj["block_start"]), int(obj["block_end"])


class ProducerIdManager:
    def __init__(self, broker_id: int, store: CoordinationStore) -> None:
        self.broker_id = broker_id
        self.store = store
        self._next = 0
        self._end = -1  # inclusive end of the current block

    async def next_producer_id(self) -> int:
        if self._next > self._end:
            await self._allocate_block()
        pid = self._next
        self._next += 1
        return pid

    async def _allocate_block(self) -> None:
        while True:
            found = await self.store.get_or_none(PATH)
            if found is None:
                start = 0
                try:
                    await self.store.create(PATH, encode_block(self.broker_id, 0, BLOCK_SIZE - 1),
                                            makepath=True)
                except NodeExistsError:
                    continue
            else:
                data, stat = found
                start = decode_block(data)[1] + 1 if data else 0
                try:
                    await self.store.set(
                        PATH, encode_block(self.broker_id, start, start + BLOCK_SIZE - 1),
                        version=stat.version)
                except BadVersionError:
                    continue  # another broker took the block: read again
            self._next, self._end = start, start + BLOCK_SIZE - 1
            return
