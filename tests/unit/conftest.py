"""Fixtures shared by unit tests in more than one folder."""

from __future__ import annotations

import pytest

from tests.tls_certs import Certs, make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA, a server and a client certificate, made once per test module."""
    return make_certs(tmp_path_factory.mktemp("certs"))
