"""The embedded store's server-side session timeout (the fault API's store cut): a client
disconnected longer than its session timeout has its session expired by the server; one that
reconnects sooner keeps it; a client without a timeout is never expired on its own."""

from __future__ import annotations

import asyncio

from odradek.coordination.embedded import EmbeddedZooKeeper
from odradek.coordination.store import SessionState


def test_a_silent_session_expires_after_its_timeout() -> None:
    async def body() -> None:
        server = EmbeddedZooKeeper()
        broker = server.client(session_timeout_ms=100)
        other = server.client()
        await broker.start()
        await other.start()
        states: list[SessionState] = []
        broker.add_session_listener(states.append)
        await broker.create("/brokers/ids/1", ephemeral=True, makepath=True)
        session = broker.session_id

        broker.disconnect()  # back within the timeout: the same session
        await asyncio.sleep(0.03)
        broker.reconnect()
        await asyncio.sleep(0.2)
        assert broker.session_id == session and await other.exists("/brokers/ids/1")

        broker.disconnect()  # silent past the timeout: the server ends the session
        await asyncio.sleep(0.2)
        assert await other.exists("/brokers/ids/1") is None
        assert not broker.connected and session not in server.sessions
        broker.reconnect()  # the client learns it now, on a new session
        await asyncio.sleep(0)
        assert broker.connected and broker.session_id not in (None, session)
        assert states[-2:] == [SessionState.EXPIRED, SessionState.CONNECTED]

        plain = other  # no timeout: only expire_session() ends it
        plain_session = plain.session_id
        plain.disconnect()
        await asyncio.sleep(0.15)
        assert plain_session in server.sessions
        plain.reconnect()
        await broker.close()
        await plain.close()
    asyncio.run(body())
