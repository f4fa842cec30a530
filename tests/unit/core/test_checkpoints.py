from __future__ import annotations

import json
from math import gcd

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.core.checkpoints import CheckpointMap, migrate_checkpoints
from pipelines.core.ssp import SystemStreamPartition
from pipelines.errors import ConfigError, ModelError

P0 = SystemStreamPartition("deltalog", "events", 0)


def _map(factor: int, offsets_by_partition: dict[int, list[int]]) -> CheckpointMap:
    offsets = {}
    for p, offs in offsets_by_partition.items():
        ssp = SystemStreamPartition("deltalog", "events", p)
        for b, off in enumerate(offs):
            offsets[ssp if factor == 1 else ssp.bucket(b)] = str(off)
    return CheckpointMap(factor, offsets)


@st.composite
def old_maps(draw: st.DrawFn) -> CheckpointMap:
    factor = draw(st.integers(1, 12))
    parts = draw(st.integers(1, 4))
    offs = {p: draw(st.lists(st.integers(0, 10**6), min_size=factor, max_size=factor)) for p in range(parts)}
    return _map(factor, offs)


@given(old_maps(), st.integers(1, 12), st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=30))
def test_no_key_starts_after_any_old_checkpoint_that_covered_it(old, new_factor, hashes) -> None:
    new = migrate_checkpoints(old, new_factor, old.partitions(), earliest={}, position_key=int)
    for ssp in old.partitions():
        for h in hashes:  # a key with hash h: old bucket h mod X, new bucket h mod X'
            before = int(old.offset(ssp, h % old.factor))
            after = int(new.offset(ssp, h % new_factor))
            assert after <= before


@given(old_maps(), st.integers(1, 4))
def test_split_is_inheritance_from_the_parent_bucket(old, k) -> None:
    x2 = old.factor * k
    new = migrate_checkpoints(old, x2, old.partitions(), earliest={}, position_key=int)
    for ssp in old.partitions():
        for b in range(x2):
            assert new.offset(ssp, b) == old.offset(ssp, b % old.factor)


@given(st.integers(1, 6), st.integers(1, 4), st.lists(st.integers(0, 10**6), min_size=24, max_size=24))
def test_merge_is_the_minimum_of_the_merged_buckets(x_new, k, pool) -> None:
    x_old = x_new * k
    old = _map(x_old, {0: pool[:x_old]})
    new = migrate_checkpoints(old, x_new, old.partitions(), earliest={}, position_key=int)
    for b in range(x_new):
        merged = [int(old.offset(P0, b2)) for b2 in range(x_old) if b2 % x_new == b]
        assert int(new.offset(P0, b)) == min(merged)


@given(old_maps(), st.integers(1, 12))
def test_any_change_takes_the_minimum_over_the_gcd_class(old, x_new) -> None:
    new = migrate_checkpoints(old, x_new, old.partitions(), earliest={}, position_key=int)
    g = gcd(old.factor, x_new)
    for ssp in old.partitions():
        for b in range(x_new):
            expected = min(int(old.offset(ssp, b2)) for b2 in range(old.factor) if b2 % g == b % g)
            assert int(new.offset(ssp, b)) == expected


@given(old_maps())
def test_same_factor_is_identity(old) -> None:
    assert migrate_checkpoints(old, old.factor, old.partitions(), earliest={}, position_key=int) == old


def test_new_partitions_start_at_their_earliest_offset() -> None:
    old = _map(2, {0: [10, 20], 1: [30, 40]})
    new_parts = [SystemStreamPartition("deltalog", "events", p) for p in range(4)]
    earliest = {new_parts[2]: "0", new_parts[3]: "5"}
    new = migrate_checkpoints(old, 2, new_parts, earliest=earliest, position_key=int)
    assert [new.offset(new_parts[2], b) for b in range(2)] == ["0", "0"]
    assert [new.offset(new_parts[3], b) for b in range(2)] == ["5", "5"]
    assert new.offset(new_parts[1], 1) == "40"
    with pytest.raises(ModelError, match="is new and no earliest offset"):
        migrate_checkpoints(old, 2, new_parts, earliest={}, position_key=int)


def test_offsets_compare_as_numbers_not_strings() -> None:
    # Kinesis sequence numbers: "9..." sorts after "10..." as text.
    old = CheckpointMap(2, {P0.bucket(0): "9" * 20, P0.bucket(1): "1" + "0" * 55})
    new = migrate_checkpoints(old, 1, old.partitions(), earliest={}, position_key=int)
    assert new.offset(P0, 0) == "9" * 20


def test_the_system_comparator_is_used() -> None:
    old = CheckpointMap(2, {P0.bucket(0): "b", P0.bucket(1): "a"})
    new = migrate_checkpoints(old, 1, old.partitions(), earliest={}, position_key=lambda o: -ord(o))
    assert new.offset(P0, 0) == "b"


def test_an_incomplete_map_is_refused() -> None:
    old = CheckpointMap(4, {P0.bucket(0): "1", P0.bucket(1): "1", P0.bucket(3): "1"})
    with pytest.raises(ModelError, match=r"no offset for \[deltalog, events, 0, 2\]"):
        migrate_checkpoints(old, 2, old.partitions(), earliest={}, position_key=int)


def test_json_round_trip_and_three_part_checkpoints() -> None:
    old = _map(4, {0: [1, 2, 3, 4], 1: [5, 6, 7, 8]})
    assert CheckpointMap.loads(json.dumps(old.to_json())) == old
    legacy = CheckpointMap.loads(json.dumps({"checkpoints": [{"ssp": ["kafka", "t", 0], "offset": 17}]}))
    assert legacy.factor == 1 and legacy.offset(SystemStreamPartition("kafka", "t", 0), 0) == "17"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nope", "not valid JSON"),
        ('{"factor": 2}', "must be an object"),
        ('{"factor": 0, "checkpoints": []}', "elasticity factor must be >= 1"),
        ('{"factor": 1, "checkpoints": [{"ssp": ["a", "b", 0]}]}', "must have 'ssp' and 'offset'"),
        (
            '{"factor": 1, "checkpoints": [{"ssp": ["a", "b", 0], "offset": 1}, {"ssp": ["a", "b", 0], "offset": 2}]}',
            "two offsets",
        ),
        (
            '{"factor": 2, "checkpoints": [{"ssp": ["a", "b", 0, 5], "offset": 1}]}',
            "no offset for|key bucket >= factor",
        ),
        ('{"factor": 1, "checkpoints": 5}', "'checkpoints' must be a list of .*, got 5$"),
        ('{"factor": 1, "checkpoints": null}', "'checkpoints' must be a list of .*, got None$"),
        ('{"factor": 1, "checkpoints": {"a": 1}}', "'checkpoints' must be a list"),
        ('{"factor": "²", "checkpoints": []}', "got '²' \\(str\\): write it in digits 0-9"),
        pytest.param("[" * 100_000, "nests too deeply", id="100000-brackets"),
        pytest.param(
            '{"checkpoints": [{"ssp": ' + "[" * 500 + "]" * 500 + ', "offset": 1}]}', "SSP must be", id="500-deep-ssp"
        ),
        (
            '{"factor": 1, "checkpoints": [{"ssp": ["a", "b", 1000000000000], "offset": 1}]}',
            "checkpoint #0: partition 1,000,000,000,000 is past the last partition a stream can have",
        ),
    ],
)
def test_bad_checkpoint_maps(text: str, message: str) -> None:
    with pytest.raises(ModelError, match=message) as info:
        CheckpointMap.loads(text)
    assert len(str(info.value)) < 300  # one short line: what was given is cut, a RecursionError never escapes


ROW = '{"ssp": ["kafka", "t", 0], "offset": 1}'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            '{"checkpoints": [{"ssp": ["deltalog", "a/b", 0], "offset": 1}]}',
            r"^checkpoint #0: stream name 'a/b' is invalid: use 1-249 characters of letters, digits",
            id="stream-with-a-slash",
        ),
        pytest.param(
            '{"checkpoints": [' + ROW + ', {"ssp": ["kafka", "..", 0], "offset": 1}]}',
            r"^checkpoint #1: stream name '\.\.' is invalid",
            id="stream-dot-dot",
        ),
        pytest.param(
            '{"checkpoints": [{"ssp": {"system": "", "stream": "t", "partition": 0}, "offset": 1}]}',
            r"^checkpoint #0: system name '' is invalid",
            id="empty-system-samza-form",
        ),
        pytest.param(
            '{"factor": 1, "extra": 1, "checkpoints": [' + ROW + "]}",
            r"^checkpoint map has unknown key 'extra'; its keys are 'factor' and 'checkpoints'$",
            id="one-unknown-key",
        ),
        pytest.param(
            '{"factr": 2, "job": "j", "checkpoints": [' + ROW + "]}",
            r"^checkpoint map has unknown keys 'factr', 'job'; its keys are 'factor' and 'checkpoints'$",
            id="a-misspelt-factor",
        ),
        pytest.param(
            '{"checkpoints": [' + ROW + "], " + ", ".join(f'"k{i}": 0' for i in range(1000)) + "}",
            r"^checkpoint map has unknown keys 'k0', 'k1', 'k10', .* and 99\d more; its keys are",
            id="a-thousand-unknown-keys",
        ),
        pytest.param(
            '{"factor": 2, "checkpoints": []}',
            r"^checkpoint map has no checkpoints: nothing to migrate, so probably not the file meant",
            id="empty",
        ),
        # a key written twice: json keeps the last one silently, so the map meant whatever its reader chose
        pytest.param(
            '{"factor": 4, "checkpoints": [' + ROW + '], "factor": 1}',
            r"^checkpoint map has the key 'factor' twice in one object: which one counts would be the reader's "
            r"choice; write each key once$",
            id="factor-twice",
        ),
        pytest.param(
            '{"checkpoints": [{"ssp": ["kafka", "t", 0], "offset": 1, "offset": 900}]}',
            r"^checkpoint map has the key 'offset' twice in one object",
            id="offset-twice-in-a-row",
        ),
        pytest.param(
            '{"checkpoints": [{"ssp": {"system": "kafka", "stream": "t", "partition": 0, "partition": 1}, '
            '"offset": 1}]}',
            r"^checkpoint map has the key 'partition' twice in one object",
            id="partition-twice-in-a-samza-ssp",
        ),
        pytest.param(
            '{"checkpoints": [' + ROW + "], " + '"' + "k" * 5000 + '": 1, "' + "k" * 5000 + '": 2}',
            r"^checkpoint map has the key 'kkkk.*\(5,002 characters\) twice in one object",
            id="a-long-key-twice",
        ),
        # a key a checkpoint does not have: ignored, a misspelt 'offset' was read as if it were not there
        pytest.param(
            '{"checkpoints": [{"ssp": ["kafka", "t", 0], "offset": 1, "ofset": 2}]}',
            r"^checkpoint #0 has unknown key 'ofset'; a checkpoint's keys are 'ssp' and 'offset'$",
            id="one-unknown-key-in-a-row",
        ),
        pytest.param(
            '{"checkpoints": [' + ROW + ', {"ssp": ["kafka", "t", 1], "ofset": 2, "note": "x"}]}',
            r"^checkpoint #1 has unknown keys 'note', 'ofset'; a checkpoint's keys are 'ssp' and 'offset'$",
            id="a-misspelt-offset-in-the-second-row",
        ),
        pytest.param(
            '{"checkpoints": [{"ssp": ["kafka", "t", 0], "offset": 1, '
            + ", ".join(f'"k{i}": 0' for i in range(1000))
            + "}]}",
            r"^checkpoint #0 has unknown keys 'k0', 'k1', 'k10', .* and 99\d more; a checkpoint's keys are",
            id="a-thousand-unknown-keys-in-a-row",
        ),
    ],
)
def test_maps_no_job_could_have_are_refused(text: str, message: str) -> None:
    """A stream name the platform refuses everywhere else, a key that would be ignored (a misspelt 'factor'
    silently read as factor 1), or no checkpoints at all: each is a wrong file, not a map to migrate."""
    with pytest.raises(ModelError, match=message) as info:
        CheckpointMap.loads(text)
    assert len(str(info.value)) < 300 and "\n" not in str(info.value)


@given(
    st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True).filter(lambda name: name not in (".", "..")),
    st.integers(0, 10**128),  # Kinesis sequence numbers are integers of up to 128 digits
    st.booleans(),
)
def test_every_valid_name_and_any_large_offset_loads(stream: str, offset: int, as_text: bool) -> None:
    """What the refusals above must not catch: any name the name rule allows, any offset a system can have."""
    row = {"ssp": ["kinesis", stream, 0], "offset": str(offset) if as_text else offset}
    loaded = CheckpointMap.loads(json.dumps({"factor": 1, "checkpoints": [row]}))
    assert loaded.offsets == {SystemStreamPartition("kinesis", stream, 0): str(offset)}


def test_a_migration_too_large_to_build_is_refused_before_building_it() -> None:
    """100,000 partitions x 1024 buckets would be 102 million checkpoints: refused up front, not hours later."""
    old = _map(1, {0: [0]})
    many = [SystemStreamPartition("deltalog", "events", p) for p in range(100_000)]
    with pytest.raises(ConfigError, match=r"100,000 partitions x factor 1,024 = 102,400,000 key buckets"):
        migrate_checkpoints(old, 1024, many, earliest={}, position_key=int)
    far = [P0, SystemStreamPartition("deltalog", "events", 10**12)]
    with pytest.raises(ConfigError, match=r"partition 1,000,000,000,000 is past the last partition"):
        migrate_checkpoints(old, 2, far, earliest={}, position_key=int)


def test_partition_floor_is_the_smallest_bucket_offset_per_whole_partition() -> None:
    from pipelines.core.checkpoints import partition_floor

    offsets = [
        (SystemStreamPartition("s", "t", 0, 0), "12"),
        (SystemStreamPartition("s", "t", 0, 1), "9"),
        (SystemStreamPartition("s", "t", 1), "100000000000000000000000"),  # Kinesis-sized, compared as integers
        (SystemStreamPartition("s", "t", 2, 0), "10"),
        (SystemStreamPartition("s", "t", 2, 1), "9"),  # "10" < "9" as strings: must not win
    ]
    assert partition_floor(offsets, int) == {  # positions come back as they were, chosen by the system's order
        SystemStreamPartition("s", "t", 0): "9",
        SystemStreamPartition("s", "t", 1): "100000000000000000000000",
        SystemStreamPartition("s", "t", 2): "9",
    }
