"""common/entropy.py: under an installed stream (the simulation's) the random choices, SCRAM
salts and nonces included, are a function of its seed; without one they come from the
operating system, as before."""

from __future__ import annotations

import random

import scramp

from odradek.common import entropy
from odradek.security.sasl_server import ScramServer
from odradek.security.scram import credential_from_password


def test_tokens_follow_the_installed_stream_and_the_os_without_one() -> None:
    def draw(seed: int) -> tuple[bytes, str, bytes]:
        with entropy.use(random.Random(seed)):
            return (entropy.token_bytes(16), entropy.token_hex(),
                    credential_from_password("SCRAM-SHA-256", "secret", 4096).salt)
    first = draw(7)
    assert first == draw(7) and first != draw(8)
    assert len(first[0]) == 16 and len(first[1]) == 64 and len(first[2]) == 32
    assert entropy.token_bytes() != entropy.token_bytes()  # os.urandom, no stream
    assert entropy.token_hex() != first[1]


def test_the_scram_server_nonce_comes_from_the_stream() -> None:
    credential = credential_from_password("SCRAM-SHA-256", "secret", 4096, salt=b"s" * 16)

    def server_first(seed: int) -> str:
        client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "secret", c_nonce="abc")
        with entropy.use(random.Random(seed)):
            server = ScramServer("SCRAM-SHA-256", lambda m, u: credential)
        return server.evaluate(client.get_client_first().encode()).decode()
    assert server_first(3) == server_first(3) != server_first(4)
