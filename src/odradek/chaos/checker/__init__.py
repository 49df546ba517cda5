"""What checks a chaos run: the Jepsen-style history (`history`), the consistency checker and its
report (`consistency`, `report`: docs/checker.md), the replicas' logs read back after a clean stop
(`replicas`) and the verdict of a run of process faults (`verdict`)."""
