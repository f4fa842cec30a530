"""An Airflow connection, read the same way for every input system, also where Airflow is not installed.

Systems name an Airflow connection for their secrets (Kinesis ``aws_conn_id``,
Kafka ``connection_id``) instead of putting them in the job YAML. Spark
executors resolve it too, often without Airflow, so ``AIRFLOW_CONN_<ID>`` is
read here first, in either form Airflow accepts: a connection URI
(``aws://KEY:SECRET@/?region_name=eu-west-1``; the extra is the query, or the
JSON in its ``__extra__`` parameter) or a JSON object (``{"login": ...,
"extra": {...}}``). The URI is parsed by Airflow's own rules (its
``Connection.from_uri``), which the tests compare against. Without the
variable, Airflow's secrets backends are asked where Airflow runs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pipelines.errors import ConfigError

EXTRA_KEY = "__extra__"
"""The URI query parameter that holds the whole extra as JSON (Airflow's ``Connection.EXTRA_KEY``)."""


@dataclass(frozen=True)
class Connection:
    """What a system needs of an Airflow connection; the secrets stay out of ``repr`` (and so out of logs)."""

    conn_id: str
    conn_type: str | None = None
    host: str | None = None
    port: int | None = None
    schema: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict, repr=False)


def env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def read_connection(conn_id: str, where: str, instead: str = "") -> Connection:
    """The connection ``conn_id``: ``AIRFLOW_CONN_<ID>`` first, then Airflow's own lookup where Airflow is installed.

    ``where`` names the setting that gave the id in messages (``aws_conn_id``);
    ``instead`` is what the user may do instead when neither is there.
    """
    raw = os.environ.get(env_name(conn_id))
    if raw:
        return parse_connection(conn_id, raw)
    try:
        from airflow.sdk import BaseHook  # only where Airflow runs; executors read the variable
    except ImportError:
        raise ConfigError(
            f"{where} {conn_id!r}: no {env_name(conn_id)} in the environment and Airflow is not installed here; "
            f"set the variable{instead}"
        ) from None
    try:
        found = BaseHook.get_connection(conn_id)
    except Exception as error:
        raise ConfigError(f"{where} {conn_id!r}: Airflow has no such connection ({error})") from None
    return Connection(
        conn_id=conn_id,
        conn_type=found.conn_type,
        host=found.host,
        port=found.port,
        schema=found.schema,
        login=found.login,
        password=found.password,
        extra=_extra(conn_id, found.extra_dejson),
    )


def parse_connection(conn_id: str, raw: str) -> Connection:
    """A connection in either of the forms Airflow accepts in ``AIRFLOW_CONN_<ID>``: JSON or a URI."""
    text = raw.strip()
    if text.startswith("{"):
        return _from_json(conn_id, text)
    return _from_uri(conn_id, text)


def _json_object(text: str, not_json: str, not_object: str) -> dict[str, Any]:
    """``text`` as a JSON object, or a ``ConfigError`` that says which of the two it failed to be."""
    try:
        value = json.loads(text)
    except ValueError:
        raise ConfigError(not_json) from None
    if not isinstance(value, Mapping):
        raise ConfigError(not_object)
    return dict(value)


def _from_json(conn_id: str, text: str) -> Connection:
    neither = f"{env_name(conn_id)} is neither a connection URI nor JSON"
    value = _json_object(text, neither, neither)
    port = value.get("port")
    try:
        port = int(port) if port not in (None, "") else None
    except (TypeError, ValueError):
        raise ConfigError(f"{env_name(conn_id)}: 'port' must be a whole number, got {port!r}") from None
    return Connection(
        conn_id=conn_id,
        conn_type=_conn_type(value.get("conn_type")),
        host=value.get("host"),
        port=port,
        schema=value.get("schema"),
        login=value.get("login"),
        password=value.get("password"),
        extra=_extra(conn_id, value.get("extra")),
    )


def _from_uri(conn_id: str, uri: str) -> Connection:
    """Airflow's ``Connection.from_uri``: ``type://login:password@host:port/schema?extra``, host may carry a scheme."""
    schemes = uri.count("://")
    if schemes == 0 or schemes > 2:
        raise ConfigError(f"{env_name(conn_id)} is neither a connection URI nor JSON")
    with_protocol = schemes == 2
    conn_type = urlsplit(uri).scheme
    rest = uri.replace(f"{conn_type}://", "" if with_protocol else "//")
    if with_protocol and any(c in rest.split("://", 1)[0] for c in "@:"):
        raise ConfigError(f"{env_name(conn_id)} is not a valid connection URI")
    parts = urlsplit(rest)
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"{env_name(conn_id)}: the port is not a number") from None
    host = _hostname(parts)
    if host and with_protocol:
        host = f"{parts.scheme}://{host}"
    extra: Any = None
    if parts.query:
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        extra = query.get(EXTRA_KEY, query)
    return Connection(
        conn_id=conn_id,
        conn_type=_conn_type(conn_type),
        host=host or None,
        port=port,
        schema=unquote(parts.path[1:]) or None,
        login=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        extra=_extra(conn_id, extra),
    )


def _hostname(parts: Any) -> str:
    """The host as written (``urlsplit`` lowercases it, and cuts it at a ``/``, which Airflow keeps)."""
    host = unquote(parts.hostname or "")
    if "/" in host:
        host = parts.netloc.rsplit("@", 1)[-1].split(":", 1)[0]
        host = unquote(host)
    return host


def _conn_type(value: Any) -> str | None:
    if not value:
        return None
    text = str(value)
    return "postgres" if text == "postgresql" else text.replace("-", "_")


def _extra(conn_id: str, value: Any) -> dict[str, Any]:
    if value in (None, ""):
        return {}
    not_object = f"Airflow connection {conn_id!r}: its extra must be a JSON object"
    if isinstance(value, str):
        return _json_object(value, f"Airflow connection {conn_id!r}: its extra is not JSON", not_object)
    if not isinstance(value, Mapping):
        raise ConfigError(not_object)
    return dict(value)
