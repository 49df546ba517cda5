"""Broker processes for the interop and chaos layers: moved to
`odradek.chaos.environment.processes` (the
`odradek chaos` tool uses them too); re-exported here for the tests."""

from odradek.chaos.environment.processes import BrokerError, BrokerProcess

__all__ = ["BrokerError", "BrokerProcess"]
