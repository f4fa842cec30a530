"""Parsing ``kafka-consumer-groups --describe`` (``testbed.servers.kafka_broker.parse_group_describe``)."""

from __future__ import annotations

from testbed.servers.kafka_broker import GroupOffset, parse_group_describe

WIDE = "{:<16}{:<16}{:<11}{:<16}{:<16}{:<16}{:<16}{:<16}{}"  # the tool's column widths
IDLE_GROUP = "\n".join(
    [
        "",
        "Consumer group 'orders' has no active members.",
        "",
        WIDE.format(
            "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"
        ),
        WIDE.format("orders", "events", "1", "-", "26", "-", "-", "-", "-"),
        WIDE.format("orders", "events", "0", "3", "24", "21", "-", "-", "-"),
    ]
)


def test_rows_are_parsed_by_their_header_sorted_and_a_dash_is_none() -> None:
    assert parse_group_describe(IDLE_GROUP) == [
        GroupOffset("orders", "events", 0, 3, 24, 21),
        GroupOffset("orders", "events", 1, None, 26, None),
    ]


def test_a_note_without_a_table_gives_no_rows() -> None:
    assert parse_group_describe("Consumer group 'nobody' does not exist.\n") == []
