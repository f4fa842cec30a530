"""The one Airflow-connection reader every input system uses: both forms of ``AIRFLOW_CONN_<ID>``, secrets kept out."""

from __future__ import annotations

import json
import sys
from urllib.parse import quote

import pytest

from pipelines.errors import ConfigError
from pipelines.systems.connections import parse_connection, read_connection


def test_a_uri_gives_login_password_and_the_query_as_extra() -> None:
    conn = parse_connection("aws_prod", "aws://AKIA%2FX:se%40cret@/?region_name=eu-west-1&aws_session_token=tok")
    assert (conn.conn_type, conn.host, conn.port, conn.schema) == ("aws", None, None, None)
    assert (conn.login, conn.password) == ("AKIA/X", "se@cret")
    assert conn.extra == {"region_name": "eu-west-1", "aws_session_token": "tok"}


def test_a_uri_may_carry_its_whole_extra_as_json() -> None:
    extra = {"bootstrap.servers": "b1:9092,b2:9092", "sasl.password": "p@ss", "linger.ms": 5}
    conn = parse_connection("kafka_prod", "kafka://?__extra__=" + quote(json.dumps(extra)))
    assert conn.conn_type == "kafka" and conn.extra == extra


def test_a_uri_with_host_port_schema_and_a_protocol_in_the_host() -> None:
    conn = parse_connection("db", "postgresql://u:p@Db.Example.com:5432/my%20db")
    assert (conn.conn_type, conn.host, conn.port, conn.schema) == ("postgres", "db.example.com", 5432, "my db")
    web = parse_connection("web", "http-api://https://api.example.com:8443/v1")
    assert (web.conn_type, web.host, web.port, web.schema) == ("http_api", "https://api.example.com", 8443, "v1")


def test_the_json_form_with_the_extra_as_an_object_or_a_string() -> None:
    as_object = parse_connection("k", '{"conn_type": "aws", "login": "id", "password": "s", "extra": {"a": "1"}}')
    as_string = parse_connection("k", json.dumps({"login": "id", "password": "s", "extra": '{"a": "1"}', "port": "9"}))
    assert (as_object.login, as_object.password, as_object.extra) == ("id", "s", {"a": "1"})
    assert (as_string.extra, as_string.port) == ({"a": "1"}, 9)


def test_secrets_stay_out_of_the_repr() -> None:
    conn = parse_connection("k", "aws://id:hunter2@/?aws_session_token=tok123")
    assert "hunter2" not in repr(conn) and "tok123" not in repr(conn) and "id" in repr(conn)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("just words", "AIRFLOW_CONN_K is neither a connection URI nor JSON"),
        ("{not json", "AIRFLOW_CONN_K is neither a connection URI nor JSON"),
        ("[1, 2]", "AIRFLOW_CONN_K is neither a connection URI nor JSON"),
        ('{"extra": "not json"}', "its extra is not JSON"),
        ('{"extra": [1]}', "its extra must be a JSON object"),
        ('{"port": "http"}', "'port' must be a whole number"),
        ("a://b://c://d", "neither a connection URI nor JSON"),
        ("aws://id:s@host:port/", "the port is not a number"),
    ],
)
def test_a_connection_that_does_not_parse_is_refused_with_the_reason(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        parse_connection("k", raw)


def test_the_environment_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_AWS_PROD", "aws://id:secret@/")
    monkeypatch.setitem(sys.modules, "airflow.sdk", None)  # Airflow is never asked when the variable is there
    assert read_connection("aws_prod", "aws_conn_id").password == "secret"


def test_without_the_variable_nor_airflow_the_setting_and_the_way_out_are_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_NOWHERE", raising=False)
    monkeypatch.setitem(sys.modules, "airflow.sdk", None)  # as on a Spark executor without Airflow
    with pytest.raises(ConfigError) as error:
        read_connection("nowhere", "aws_conn_id", ", or use the standard AWS chain instead")
    assert str(error.value) == (
        "aws_conn_id 'nowhere': no AIRFLOW_CONN_NOWHERE in the environment and Airflow is not installed here; "
        "set the variable, or use the standard AWS chain instead"
    )
