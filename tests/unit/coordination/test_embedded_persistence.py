"""The embedded store's journal: persistent znodes survive a restart (and a torn last write),
ephemeral ones do not."""

from __future__ import annotations

import asyncio
from pathlib import Path

from odradek.coordination.embedded import EmbeddedZooKeeper


async def _write(zk: EmbeddedZooKeeper) -> None:
    store = zk.client()
    await store.start()
    await store.create("/brokers/topics/t", b'{"version":1}', makepath=True)
    await store.set("/brokers/topics/t", b'{"version":1,"partitions":{"0":[0]}}')
    await store.create("/brokers/ids/0", b"me", ephemeral=True, makepath=True)
    await store.create("/gone", b"x")
    await store.delete("/gone")
    await store.create("/seq/n-", b"", sequence=True, makepath=True)
    await store.close()


async def _read(zk: EmbeddedZooKeeper) -> dict[str, object]:
    store = zk.client()
    await store.start()
    data, stat = await store.get("/brokers/topics/t")
    out = {
        "data": data, "version": stat.version,
        "ids": await store.get_children("/brokers/ids"),
        "gone": await store.exists("/gone"),
        "next_seq": await store.create("/seq/n-", b"", sequence=True),
    }
    await store.close()
    return out


def test_persistent_nodes_survive_restart(tmp_path: Path) -> None:
    zk = EmbeddedZooKeeper(persist_dir=tmp_path)
    asyncio.run(_write(zk))
    zk.close()
    again = EmbeddedZooKeeper(persist_dir=tmp_path)
    got = asyncio.run(_read(again))
    again.close()
    assert got["data"] == b'{"version":1,"partitions":{"0":[0]}}'
    assert got["version"] == 1
    assert got["ids"] == []  # the ephemeral registration died with its session
    assert got["gone"] is None
    assert got["next_seq"] == "/seq/n-0000000001"  # sequence counters persist too


def test_torn_last_line_is_ignored(tmp_path: Path) -> None:
    zk = EmbeddedZooKeeper(persist_dir=tmp_path)
    asyncio.run(_write(zk))
    zk.close()
    # Fresh start folds the log into the snapshot; add a complete and a torn entry by hand.
    again = EmbeddedZooKeeper(persist_dir=tmp_path)
    again.close()
    with open(tmp_path / "txnlog.jsonl", "a") as f:
        f.write('{"zxid":999,"nodes":{"/gone":null}}\n{"zxid":1000,"nodes":{"/brokers/top')
    third = EmbeddedZooKeeper(persist_dir=tmp_path)
    got = asyncio.run(_read(third))
    third.close()
    assert got["data"] == b'{"version":1,"partitions":{"0":[0]}}'
    assert third.last_zxid >= 999
