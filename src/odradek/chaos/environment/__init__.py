"""What a chaos run's faults act on, and the faults: broker processes (`processes`), process
faults (`process_faults`: kill -9, SIGSTOP, controlled shutdown, admin operations), Linux network
namespaces (`netns`), a ZooKeeper ensemble (`zk_ensemble`), full and failed log directories
(`disk_faults`)."""
