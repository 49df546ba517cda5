"""The Jepsen-style chaos kit: broker processes under faults, a workload on a real Kafka client,
and a checker of what Kafka promises (docs/faults.md, docs/checker.md).

A library and the scenarios built on it; a scenario imports the library, never another scenario:

* `config` (the settings of a run of process faults), `workload` (producers, consumers, the
  read-back), `support` (polling, progress lines, the run's directory), `requirements` (the
  ``chaos`` extra: confluent-kafka, imported only where a client is made);
* `environment`: what the faults act on and how: broker processes (`processes`), process faults
  (`process_faults`), network namespaces (`netns`), a ZooKeeper ensemble (`zk_ensemble`), full
  and failed log directories (`disk_faults`);
* `checker`: the history (`history`), the consistency checker (`consistency`, `report`), the
  replicas' logs (`replicas`) and a run's verdict (`verdict`);
* `scenarios`: the runs of `odradek chaos` (`replication`, `transactions` with its pipeline
  process `txn_pipeline`, `network`, `disk`); `command` is the command itself.

The kit is a client of the cluster (the ``chaos`` contract of pyproject.toml): it never imports
the server, the controller, the coordinators or odradek.cluster.
"""
