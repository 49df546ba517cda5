"""The fault network of in-process clusters: a pure policy of cut and shaped links
(`network`) and the TCP forwarders that enforce it (`proxy`). `odradek.cluster.ClusterFaults`
is the API users call; docs/faults.md describes it."""

from .network import CLIENTS, STORE, LinkShape, NetworkState, Node, Rule
from .proxy import FaultNetwork, LinkProxy

__all__ = ["CLIENTS", "STORE", "FaultNetwork", "LinkProxy", "LinkShape", "NetworkState", "Node",
           "Rule"]
