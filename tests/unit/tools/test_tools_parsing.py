"""The pure parts of `odradek topics` and `odradek consumer-groups` (S-6.3): argument parsing
and validation with Kafka's messages, the offset-reset computation, and the output formats of
Kafka's TopicCommand and ConsumerGroupCommand."""

from __future__ import annotations

import datetime as dt
import time
import uuid
from typing import Any

import pytest

from odradek.cli import build_parser
from odradek.client.errors import KafkaError
from odradek.client.types import ConfigEntry, PartitionDescription, TopicDescription
from odradek.tools import consumer_groups as cg
from odradek.tools import topics
from odradek.tools.command import ToolError
from odradek.tools.topics import PartitionState


# -- topics: parsing ------------------------------------------------------------------------------
def test_replica_assignment_parses_partition_by_partition() -> None:
    assert topics.parse_replica_assignment("0:1:2,1:2:0") == {0: [0, 1, 2], 1: [1, 2, 0]}
    assert topics.parse_replica_assignment(" 3 ") == {0: [3]}
    assert topics.parse_replica_assignment("1:0, 2 : 1") == {0: [1, 0], 1: [2, 1]}


@pytest.mark.parametrize(("text", "message"), [
    ("0:0,1:2", "Partition replica lists may not contain duplicate entries: 0"),
    ("0:1,1:2:0", "Partition 1 has different replication factor: [1, 2, 0]"),
    ("0:x", "broker id that is not an integer"),
])
def test_replica_assignment_errors_use_kafkas_messages(text: str, message: str) -> None:
    with pytest.raises(ToolError, match=message.replace("[", r"\[").replace("]", r"\]")):
        topics.parse_replica_assignment(text)


def test_topic_configs_parse_with_spaces_and_reject_malformed() -> None:
    assert topics.parse_topic_configs(["retention.ms=1000", "cleanup.policy = compact"]) == {
        "retention.ms": "1000", "cleanup.policy": "compact"}
    for bad in ("retention.ms", "a=b=c", "=1"):
        with pytest.raises(ToolError, match='must be in the format "key=val"'):
            topics.parse_topic_configs([bad])


def test_topic_selection_is_a_whole_name_regex_with_internal_filter() -> None:
    names = ["orders", "orders-dlq", "__consumer_offsets", "payments"]
    assert topics.select_topics(names, None, False) == sorted(names)
    assert topics.select_topics(names, None, True) == ["orders", "orders-dlq", "payments"]
    assert topics.select_topics(names, "orders", False) == ["orders"]  # not a prefix match
    assert topics.select_topics(names, "orders.*", False) == ["orders", "orders-dlq"]
    assert topics.select_topics(names, "orders,payments", False) == ["orders", "payments"]
    assert topics.select_topics(names, "__.*", True) == []
    with pytest.raises(ToolError, match="Invalid topic regex"):
        topics.select_topics(names, "(", False)


def _ns(tool: str, *argv: str) -> Any:
    return build_parser().parse_args([tool, *argv])


@pytest.mark.parametrize(("argv", "message"), [
    (["--bootstrap-server", "x"], "exactly one action"),
    (["--bootstrap-server", "x", "--list", "--describe"], "exactly one action"),
    (["--create", "--topic", "t"], "--bootstrap-server must be specified"),
    (["--bootstrap-server", "x", "--create"], 'Missing required argument "[topic]"'),
    (["--bootstrap-server", "x", "--alter", "--topic", "t"],
     'Missing required argument "[partitions]"'),
    (["--bootstrap-server", "x", "--describe", "--partitions", "3"],
     'Option "[partitions]" can\'t be used with option "[describe]"'),
    (["--bootstrap-server", "x", "--alter", "--topic", "t", "--partitions", "3",
      "--replication-factor", "2"],
     'Option "[replication-factor]" can\'t be used with option "[alter]"'),
    (["--bootstrap-server", "x", "--create", "--topic", "t", "--replica-assignment", "0",
      "--partitions", "1"],
     'Option "[replica-assignment]" can\'t be used with option "[partitions]"'),
    (["--bootstrap-server", "x", "--describe", "--topics-with-overrides",
      "--under-replicated-partitions"],
     'Option "[topics-with-overrides]" can\'t be used with option '
     '"[under-replicated-partitions]"'),
    (["--bootstrap-server", "x", "--list", "--under-replicated-partitions"],
     'Option "[under-replicated-partitions]" can\'t be used with option "[list]"'),
    (["--bootstrap-server", "x", "--create", "--topic", "t", "--if-exists"],
     'Option "[if-exists]" can\'t be used with option "[create]"'),
    (["--bootstrap-server", "x", "--create", "--topic", "t", "--partitions", "0"],
     "The partitions must be greater than 0"),
    (["--bootstrap-server", "x", "--create", "--topic", "t", "--replication-factor", "0"],
     "The replication factor must be between 1 and 32767 inclusive"),
])
def test_topic_command_line_checks(argv: list[str], message: str) -> None:
    with pytest.raises(ToolError) as err:
        topics.check_args(_ns("topics", *argv))
    assert message in str(err.value)


def test_topic_command_line_accepts_valid_combinations() -> None:
    for argv in (["--list"], ["--describe", "--under-replicated-partitions"],
                 ["--describe", "--topic", "t.*", "--exclude-internal"],
                 ["--create", "--topic", "t", "--partitions", "3", "--replication-factor", "2",
                  "--config", "retention.ms=1"],
                 ["--create", "--topic", "t", "--replica-assignment", "0:1"],
                 ["--alter", "--topic", "t", "--config", "retention.ms=5"],
                 ["--alter", "--topic", "t", "--partitions", "4", "--replica-assignment", "0,1"],
                 ["--delete", "--topic", "t", "--if-exists"]):
        topics.check_args(_ns("topics", "--bootstrap-server", "x", *argv))


def test_bad_command_line_is_a_message_and_exit_1_not_a_traceback(
        capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli import main

    assert main(["topics", "--bootstrap-server", "127.0.0.1:1", "--create"]) == 1
    assert 'Missing required argument "[topic]"' in capsys.readouterr().err
    assert main(["consumer-groups", "--bootstrap-server", "x", "--describe"]) == 1
    assert "Option [describe] takes one of these options: [group], [all-groups]" in \
        capsys.readouterr().err


# -- topics: which partitions a report shows, and the output ---------------------------------------
def test_partition_reports_follow_kafkas_definitions() -> None:
    live = {0, 1}
    healthy = PartitionState("t", 0, 0, [0, 1], [0, 1], min_isr=2)
    shrunk = PartitionState("t", 1, 1, [1, 2], [1], min_isr=2)
    leaderless = PartitionState("t", 2, -1, [2], [2], min_isr=1)
    dead_leader = PartitionState("t", 3, 2, [2, 0], [2, 0], min_isr=1)
    assert [p.under_replicated() for p in (healthy, shrunk, leaderless)] == [False, True, False]
    assert [p.unavailable(live) for p in (healthy, shrunk, leaderless, dead_leader)] == \
        [False, False, True, True]
    assert [p.under_min_isr() for p in (healthy, shrunk, leaderless)] == [False, True, True]
    assert [p.at_min_isr() for p in (healthy, shrunk, leaderless)] == [True, False, True]
    assert topics.partition_shown(shrunk, set(), live)
    assert not topics.partition_shown(healthy, {"under_replicated_partitions"}, live)
    assert topics.partition_shown(leaderless, {"under_replicated_partitions",
                                               "unavailable_partitions"}, live)


def test_describe_lines_have_kafkas_shape() -> None:
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678")
    desc = TopicDescription("orders", tid, False, [
        PartitionDescription(1, -1, 0, [2, 0], [2]),
        PartitionDescription(0, 1, 3, [1, 2, 0], [1, 0]),
    ])
    configs = {"retention.ms": ConfigEntry("retention.ms", "1000", source=1),
               "min.insync.replicas": ConfigEntry("min.insync.replicas", "2", source=1),
               "segment.bytes": ConfigEntry("segment.bytes", "1073741824", source=5,
                                            is_default=True)}
    lines = topics.describe_lines(desc, configs, {0, 1}, set(), False)
    assert lines == [
        "Topic: orders\tTopicId: EjRWeBI0VngSNFZ4EjRWeA\tPartitionCount: 2\t"
        "ReplicationFactor: 3\tConfigs: retention.ms=1000,min.insync.replicas=2",
        "\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,0\tIsr: 1,0\tOffline: 2",
        "\tTopic: orders\tPartition: 1\tLeader: none\tReplicas: 2,0\tIsr: 2\tOffline: 2",
    ]
    # A report option drops the topic line; min.insync.replicas comes from the topic's config.
    assert topics.describe_lines(desc, configs, {0, 1}, {"under_min_isr_partitions"},
                                 False) == lines[2:]
    assert topics.describe_lines(desc, configs, {0, 1, 2}, {"at_min_isr_partitions"},
                                 False) == ["\tTopic: orders\tPartition: 0\tLeader: 1\t"
                                            "Replicas: 1,2,0\tIsr: 1,0"]
    # --topics-with-overrides: only the topic line, and only when something is overridden.
    assert topics.describe_lines(desc, configs, {0, 1}, set(), True) == lines[:1]
    defaults_only = {"segment.bytes": configs["segment.bytes"]}
    assert topics.describe_lines(desc, defaults_only, {0, 1}, set(), True) == []


def test_describe_shows_a_reassignment_as_kafka_does() -> None:
    """Kafka's PartitionDescription: "Adding Replicas"/"Removing Replicas" on a partition being
    moved, whose replication factor leaves out the replicas being added (operator review)."""
    from odradek.client.types import PartitionReassignment

    desc = TopicDescription("t", None, False, [PartitionDescription(0, 1, 0, [4, 5, 1, 2], [1, 2]),
                                               PartitionDescription(1, 2, 0, [2, 3], [2, 3])])
    moving = {("t", 0): PartitionReassignment([4, 5, 1, 2], [4, 5], [1, 2])}
    lines = topics.describe_lines(desc, {}, {1, 2, 3, 4, 5}, set(), False, moving)
    assert lines == [
        "Topic: t\tPartitionCount: 2\tReplicationFactor: 2\tConfigs: ",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 4,5,1,2\tIsr: 1,2"
        "\tAdding Replicas: 4,5\tRemoving Replicas: 1,2",
        "\tTopic: t\tPartition: 1\tLeader: 2\tReplicas: 2,3\tIsr: 2,3"]
    # ISR 1,2 covers the replication factor 2: not under-replicated while 4,5 catch up
    assert topics.describe_lines(desc, {}, {1, 2, 3, 4, 5}, {"under_replicated_partitions"},
                                 False, moving) == []
    assert topics.describe_lines(desc, {}, {1, 2, 3, 4, 5}, {"under_replicated_partitions"},
                                 False) == [lines[1].split("\tAdding")[0]]


def test_kafka_error_messages_are_taken_from_the_broker_or_kafkas_defaults() -> None:
    from_broker = KafkaError.for_code(36, "Topic 't' already exists.", context="topic t")
    assert topics.error_message(from_broker) == "Topic 't' already exists."
    bare = KafkaError.for_code(68, context="group g")
    assert topics.error_message(bare) == "The group is not empty."
    assert topics.java_error(bare) == \
        "org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty."


# -- consumer groups: parsing ----------------------------------------------------------------------
@pytest.mark.parametrize(("text", "ms"), [
    ("PT0S", 0), ("PT1H", 3_600_000), ("P1DT2H3M4S", ((24 + 2) * 60 + 3) * 60_000 + 4000),
    ("pt15m", 900_000), ("PT1.5S", 1500), ("P2D", 172_800_000), ("-PT1M", -60_000),
    ("PT-30S", -30_000),
])
def test_durations_parse_as_javas_duration(text: str, ms: int) -> None:
    assert cg.parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1X", "P1H"])
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(ToolError, match="cannot be parsed to a Duration"):
        cg.parse_duration_ms(text)


def test_datetimes_parse_with_and_without_zone() -> None:
    utc_ms = int(dt.datetime(2024, 3, 1, 12, 30, 15, 250_000, tzinfo=dt.UTC).timestamp() * 1000)
    assert cg.parse_datetime_ms("2024-03-01T12:30:15.250Z") == utc_ms
    assert cg.parse_datetime_ms("2024-03-01T14:30:15.250+02:00") == utc_ms
    assert cg.parse_datetime_ms("2024-03-01T14:30:15.250+0200") == utc_ms
    assert cg.parse_datetime_ms("2024-03-01T07:30:15.250-05") == utc_ms
    assert cg.parse_datetime_ms("2024-03-01T12:30:15.250", dt.UTC) == utc_ms
    assert cg.parse_datetime_ms("2024-03-01T12:30:15", dt.UTC) == utc_ms - 250
    local = cg.parse_datetime_ms("2024-03-01T12:30:15.250")  # the machine's zone
    assert local == int(time.mktime((2024, 3, 1, 12, 30, 15, 0, 0, -1)) * 1000) + 250
    with pytest.raises(ToolError, match="does not contain a 'T'"):
        cg.parse_datetime_ms("2024-03-01 12:30:15.250")
    with pytest.raises(ToolError, match="Unparseable date"):
        cg.parse_datetime_ms("2024-13-01T12:30:15.250")


def test_topic_args_and_reset_plan_files() -> None:
    assert cg.parse_topic_arg("t") == ("t", None)
    assert cg.parse_topic_arg("t:0,2") == ("t", [0, 2])
    with pytest.raises(ToolError, match="expected topic name and partitions"):
        cg.parse_topic_arg("a:b:c")
    with pytest.raises(ToolError, match="Invalid partition 'x'"):
        cg.parse_topic_arg("t:0,x")
    assert cg.parse_reset_plan("t,0,5\nt,1,7\n", ["g"]) == {"g": {("t", 0): 5, ("t", 1): 7}}
    assert cg.parse_reset_plan("g1,t,0,5\ng2,u,1,7\n", ["g1", "g2"]) == {
        "g1": {("t", 0): 5}, "g2": {("u", 1): 7}}
    with pytest.raises(ToolError, match="Invalid reset plan line 2"):
        cg.parse_reset_plan("t,0,5\nt,x,7\n", ["g"])


def test_state_filters() -> None:
    assert cg.parse_states("stable, Empty") == {"Stable", "Empty"}
    with pytest.raises(ToolError, match=r"Invalid state list 'Sleepy'\. Valid states are: "):
        cg.parse_states("Sleepy")


# -- consumer groups: the reset computation --------------------------------------------------------
A, B = ("t", 0), ("t", 1)
START = {A: 10, B: 0}
END = {A: 50, B: 20}


@pytest.mark.parametrize(("spec", "expected"), [
    (cg.ResetSpec("to_earliest"), {A: 10, B: 0}),
    (cg.ResetSpec("to_latest"), {A: 50, B: 20}),
    (cg.ResetSpec("to_current"), {A: 30, B: 20}),  # B has no committed offset: latest
    (cg.ResetSpec("to_offset", 15), {A: 15, B: 15}),
    (cg.ResetSpec("to_offset", 5), {A: 10, B: 5}),  # clamped up to the log start
    (cg.ResetSpec("to_offset", 99), {A: 50, B: 20}),  # clamped down to the high watermark
])
def test_reset_plans(spec: cg.ResetSpec, expected: dict[Any, int]) -> None:
    assert cg.plan_reset(spec, [A, B], {A: 30}, START, END) == expected


def test_shift_by_clamps_and_needs_a_committed_offset() -> None:
    committed = {A: 30, B: 5}
    assert cg.plan_reset(cg.ResetSpec("shift_by", -5), [A, B], committed, START, END) == \
        {A: 25, B: 0}
    assert cg.plan_reset(cg.ResetSpec("shift_by", 18), [A, B], committed, START, END) == \
        {A: 48, B: 20}
    with pytest.raises(ToolError, match="Cannot shift offset for partition t-1 since there "
                                        "is no current committed offset"):
        cg.plan_reset(cg.ResetSpec("shift_by", 1), [A, B], {A: 30}, START, END)


def test_timestamp_and_file_resets() -> None:
    # No record at or after the timestamp (-1): the high watermark, as Kafka falls back.
    assert cg.plan_reset(cg.ResetSpec("to_timestamp", 123), [A, B], {}, START, END,
                         by_timestamp={A: 42, B: -1}) == {A: 42, B: 20}
    assert cg.plan_reset(cg.ResetSpec("from_file"), [A, B], {}, START, END,
                         from_file={A: 3, B: 7}) == {A: 10, B: 7}


def test_lag_is_unknown_without_an_offset_or_a_log_end() -> None:
    assert cg.lag(3, 10) == 7
    assert cg.lag(None, 10) is None
    assert cg.lag(-1, 10) is None
    assert cg.lag(3, None) is None


# -- consumer groups: output ----------------------------------------------------------------------
def test_offsets_table_has_kafkas_columns_and_dashes() -> None:
    rows = [cg.OffsetRow("g", "orders", 0, 5, 12, "c-1", "/127.0.0.1", "cid"),
            cg.OffsetRow("g", "orders", 1, None, 3, "-", "-", "-")]
    text = cg.format_offsets(rows)
    lines = text.split("\n")
    assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert lines[1].split() == ["g", "orders", "0", "5", "12", "7", "c-1", "/127.0.0.1", "cid"]
    assert lines[2].split() == ["g", "orders", "1", "-", "3", "-", "-", "-", "-"]
    # Java's %-15s columns: the header and the rows line up.
    assert lines[0].index("TOPIC") == lines[1].index("orders") == 16
    assert lines[0].index("CURRENT-OFFSET") == lines[1].index("5 ") == 43
    verbose = cg.format_offsets(rows, verbose=True).split("\n")
    assert verbose[0].split()[3] == "LEADER-EPOCH"


def test_members_state_and_plan_tables() -> None:
    rows = [cg.MemberRow("g", "m-1", "", "/h", "c", (("t", 1), ("t", 0), ("u", 2))),
            cg.MemberRow("g", "m-2", "", "/h", "c", ())]
    lines = cg.format_members(rows, verbose=True).split("\n")
    assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
                                "CURRENT-EPOCH", "CURRENT-ASSIGNMENT", "TARGET-EPOCH",
                                "TARGET-ASSIGNMENT"]
    assert lines[1].split() == ["g", "m-1", "/h", "c", "3", "-", "t:0,1;u:2", "-", "-"]
    assert lines[2].split() == ["g", "m-2", "/h", "c", "0", "-", "-", "-", "-"]
    state = cg.format_state("g", "127.0.0.1:9092  (0)", "range", "Stable", 2).split("\n")
    assert state[0].split("  ")[0] == "GROUP"
    assert "COORDINATOR (ID)" in state[0] and state[1].endswith(" 2")
    assert "127.0.0.1:9092  (0)" in state[1]
    verbose = cg.format_state("g", "h:1  (0)", "", "Empty", 0, verbose=True).split("\n")
    assert verbose[0].split()[-3:] == ["GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH", "#MEMBERS"]
    assert verbose[1].split() == ["g", "h:1", "(0)", "-", "Empty", "-", "-", "0"]
    plan = cg.format_reset_plan({"g": {("t", 1): 4, ("t", 0): 9}}).split("\n")
    assert [ln.split() for ln in plan] == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                                           ["g", "t", "0", "9"], ["g", "t", "1", "4"]]
    assert cg.format_reset_plan({}) == ""
    assert cg.export_csv({"g": {("t", 1): 4, ("t", 0): 9}}, True) == "t,0,9\nt,1,4\n"
    assert cg.export_csv({"g": {("t", 0): 9}}, False) == "g,t,0,9\n"
    listing = cg.format_group_listing([("g1", "Stable")]).split("\n")
    assert [ln.split() for ln in listing] == [["GROUP", "STATE"], ["g1", "Stable"]]


@pytest.mark.parametrize(("argv", "message"), [
    (["--list", "--describe"], "exactly one action"),
    (["--describe", "--group", "g", "--members", "--offsets"], "at most one of these options"),
    (["--describe", "--group", "g", "--state", "Stable"],
     "Option [describe] does not take a value for [state]"),
    (["--delete", "--group", "g", "--topic", "t"], "does not support topic-specific offset"),
    (["--delete-offsets", "--group", "g"], "Option [delete-offsets] takes the following"),
    (["--reset-offsets", "--group", "g", "--topic", "t"], "requires one of the following "
                                                          "scenarios"),
    (["--reset-offsets", "--group", "g", "--topic", "t", "--to-earliest", "--to-latest"],
     "can't be used with option"),
    (["--reset-offsets", "--group", "g", "--to-earliest"],
     "One of the reset scopes should be defined: --all-topics, --topic."),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--execute",
      "--dry-run"], "only accepts one of [execute] and [dry-run]"),
    (["--list", "--to-earliest"], 'Option "[to-earliest]" can only be used with option '
                                  '"[reset-offsets]"'),
    (["--describe", "--group", "g", "--all-groups"], "can't be used with option"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--to-datetime", "2020-01-01"],
     "does not contain a 'T'"),
    (["--reset-offsets", "--group", "g", "--all-topics", "--by-duration", "1h"],
     "cannot be parsed to a Duration"),
    (["--reset-offsets", "--group", "g", "--topic", "t:x", "--to-earliest"],
     "Invalid partition 'x'"),
])
def test_consumer_group_command_line_checks(argv: list[str], message: str) -> None:
    with pytest.raises(ToolError) as err:
        cg.check_args(_ns("consumer-groups", "--bootstrap-server", "x", *argv))
    assert message in str(err.value)


# -- every admin tool: bootstrap servers that cannot be used (operator review) --------------------
def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


ADMIN_TOOL_COMMANDS = [
    ["topics", "--list", "--bootstrap-server"],
    ["configs", "--describe", "--entity-type", "topics", "--bootstrap-server"],
    ["consumer-groups", "--list", "--bootstrap-server"],
    ["leader-election", "--election-type", "preferred", "--all-topic-partitions",
     "--bootstrap-server"],
    ["preferred-replica-election", "--bootstrap-server"],
    ["reassign-partitions", "--list", "--bootstrap-server"],
    ["replica-verification", "--once", "--bootstrap-server"],
]


@pytest.mark.parametrize("argv", ADMIN_TOOL_COMMANDS, ids=lambda a: a[0])
def test_a_bootstrap_server_that_is_down_is_named_as_kafkas_clients_do(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Was "no broker answered Metadata (None)" for every tool."""
    from odradek.cli import main

    port = _closed_port()
    assert main([*argv, f"127.0.0.1:{port}"]) in (1, 2)
    captured = capsys.readouterr()
    err = captured.out + captured.err  # kafka-topics prints its error on stdout
    assert (f"Connection to node -1 (127.0.0.1:{port}) could not be established. "
            "Broker may not be available. (connection refused)") in err
    assert "no broker answered" not in err and "None" not in err


@pytest.mark.parametrize("argv", ADMIN_TOOL_COMMANDS[:-1], ids=lambda a: a[0])
def test_an_invalid_bootstrap_url_is_a_message_not_a_traceback(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """configs, leader-election and reassign-partitions raised a ValueError traceback."""
    from odradek.cli import main

    assert main([*argv, "localhost:abc"]) == 1
    captured = capsys.readouterr()
    assert "Invalid url in bootstrap.servers: localhost:abc" in captured.out + captured.err


def test_bootstrap_failure_message_lists_each_server_or_falls_back() -> None:
    from odradek.client.admin import bootstrap_failure_message

    assert bootstrap_failure_message([None, None], "no broker answered") == "no broker answered"
    assert bootstrap_failure_message(["a down", None, "b down"], "x") == "a down; b down"


def test_a_server_that_is_not_kafka_is_named_too(capsys: pytest.CaptureFixture[str]) -> None:
    """A listener that accepts and closes (not a Kafka broker): the servers are named."""
    import socket
    import threading

    from odradek.cli import main

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]

        def serve() -> None:
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                conn.close()
        threading.Thread(target=serve, daemon=True).start()
        assert main(["topics", "--bootstrap-server", f"127.0.0.1:{port}", "--list"]) == 1
    out = capsys.readouterr().out
    assert f"No broker at 127.0.0.1:{port} answered a Metadata request" in out
    assert "(None)" not in out


def test_the_admin_client_names_a_server_it_cannot_reach() -> None:
    from odradek.client import Admin
    from odradek.client.errors import ConfigException, KafkaConnectionError

    port = _closed_port()
    with pytest.raises(KafkaConnectionError, match=rf"node -1 \(127.0.0.1:{port}\)"):
        Admin({"bootstrap.servers": f"127.0.0.1:{port}"})
    with pytest.raises(ConfigException, match=r"Invalid url in bootstrap\.servers"):
        Admin({"bootstrap.servers": "localhost:port"})


# -- configs: Kafka's entity shortcuts ------------------------------------------------------------
def test_configs_entity_shortcuts_stand_for_entity_type_and_name() -> None:
    from odradek.tools import configs

    for argv, expected in ((["--topic", "t"], ("topics", "t", False)),
                           (["--broker", "2"], ("brokers", "2", False)),
                           (["--broker-defaults"], ("brokers", None, True))):
        ns = _ns("configs", "--bootstrap-server", "x", "--describe", *argv)
        configs._check_args(ns)
        assert (ns.entity_type, ns.entity_name, ns.entity_default) == expected
    for argv in (["--topic", "t", "--broker", "1"], ["--topic", "t", "--entity-type", "topics"],
                 ["--broker", "1", "--entity-name", "1"], ["--broker-defaults", "--broker", "1"]):
        with pytest.raises(ToolError, match="Only one entity type may be specified"):
            configs._check_args(_ns("configs", "--bootstrap-server", "x", "--describe", *argv))
    with pytest.raises(ToolError, match="valid integer broker id"):
        configs._check_args(_ns("configs", "--bootstrap-server", "x", "--describe",
                                "--broker", "b1"))


def test_consumer_groups_partition_error_quotes_the_topic_arg_once() -> None:
    with pytest.raises(ToolError) as err:
        cg.parse_topic_arg("t:0,x")
    assert str(err.value) == "Invalid partition 'x' specified in topic arg 't:0,x'"
