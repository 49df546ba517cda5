"""Broker processes on a real ZooKeeper, inspected with kazoo: the chaos layer's cluster, now
`odradek.chaos.environment.processes.ProcessCluster` (re-exported under its former name)."""

from odradek.chaos.environment.processes import ProcessCluster, free_ports, wait_until

ZkCluster = ProcessCluster

__all__ = ["ProcessCluster", "ZkCluster", "free_ports", "wait_until"]
