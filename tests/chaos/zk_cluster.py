"""Broker processes on a real ZooKeeper, inspected with kazoo: the chaos layer's cluster, now
`odradek.tools.processes.ProcessCluster` (re-exported under its former name)."""

from odradek.tools.processes import ProcessCluster, free_ports, wait_until

ZkCluster = ProcessCluster

__all__ = ["ProcessCluster", "ZkCluster", "free_ports", "wait_until"]
