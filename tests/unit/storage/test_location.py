"""A home is a path or an s3:// URI; anything else is refused before anything is written."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipelines.errors import ConfigError
from pipelines.storage.location import Location, local, parse


def test_a_relative_path_is_made_absolute(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    loc = parse("state/home")
    assert loc == Location("file", "", str(tmp_path / "state" / "home"))
    assert loc.is_local and loc.uri == str(tmp_path / "state" / "home")
    assert parse(f"file://{tmp_path}/x") == local(tmp_path / "x")


def test_an_s3_uri_names_a_bucket_and_a_prefix() -> None:
    loc = parse("s3://my-bucket/deploy/home/")
    assert (loc.scheme, loc.bucket, loc.path) == ("s3", "my-bucket", "deploy/home")
    assert str(loc / "control" / "job_models") == "s3://my-bucket/deploy/home/control/job_models"
    assert (loc / "spark").hadoop_uri() == "s3a://my-bucket/deploy/home/spark"
    assert parse("s3://my-bucket").uri == "s3://my-bucket"
    assert (parse("s3://my-bucket") / "x").uri == "s3://my-bucket/x"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("s3a://b-1/home", "s3://b-1/home"),  # Hadoop's name: the hint says what to write
        ("gs://bucket/home", "'gs'"),
        ("hdfs://nn:8020/home", "'hdfs'"),
        ("http://127.0.0.1:9000/b/home", "'http'"),
        ("s3:bucket/home", "'s3'"),  # no //: not a relative folder named "s3:bucket"
        ("s3://Bad_Bucket/home", "not a valid S3 bucket name"),
        ("s3://ab/home", "not a valid S3 bucket name"),
        ("s3://bucket/../home", "'..'"),
        ("s3://bucket/home?x=1", "no query"),
        ("file://otherhost/home", "names a host"),
        ("   ", "empty"),
    ],
)
def test_what_is_not_a_home_is_refused_with_the_reason(value: str, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse(value)
    assert says in str(refused.value)


def test_a_part_may_not_leave_its_place() -> None:
    home = parse("s3://bucket/home")
    for bad in ("../x", "a/../../x", "/abs", "", "a\\b"):
        with pytest.raises(ValueError):
            _ = home / bad


def test_an_s3_place_is_no_local_path() -> None:
    loc = parse("s3://bucket/home")
    with pytest.raises(TypeError):
        open(loc)  # noqa: SIM115 - the point: no open() reaches object storage
    with pytest.raises(ValueError):
        loc.local_path()


segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.=", min_size=1, max_size=8).filter(
    lambda s: s not in (".", "..")
)


@given(st.lists(segment, min_size=1, max_size=5))
def test_joining_and_relating_are_inverse(parts: list[str]) -> None:
    for root in (parse("s3://bucket/base"), local("/base")):
        joined = root
        for p in parts:
            joined = joined / p
        assert joined.relative_to(root) == "/".join(parts)
        assert parse(str(joined)) == joined
        assert joined.name == parts[-1]
        assert joined.parent == (root if len(parts) == 1 else parse(str(joined).rsplit("/", 1)[0]))
