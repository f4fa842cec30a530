"""The CLI's one command table: every command, its arguments, whether it writes, and where its handler lives.

The parser, the ``--help`` order, the usage line's list of commands and the set of commands that must be
refused up front on a home they cannot write are all derived from this table (``pipelines.cli.parser``), so
they cannot drift apart. Handlers are named by dotted path and imported only when their command runs, the
way Airflow's ``cli_config`` does it: ``pipelines --help`` or a model command never loads Spark, Airflow or
the demo. This module imports nothing beyond the standard library and the pure core.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pipelines.core.durations import parse_duration
from pipelines.core.groupers import GROUPERS
from pipelines.core.limits import (
    MAX_COUNT,
    MAX_MINUTES,
    MAX_PARTITIONS,
    MAX_REASON,
    MAX_WAIT_S,
    MAX_WATCH_S,
    check_reason,
    shown,
    whole_number,
)
from pipelines.core.segments import COMPACT_SPAN_MS, COMPACT_TARGET_BYTES, retention_ms
from pipelines.core.ssp import validate_name
from pipelines.core.start import parse_start, start_time_ms
from pipelines.errors import ConfigError
from pipelines.runtime.lifetime import master_problem

EMBEDDED_SYSTEM = "deltalog"
VERBOSE_HELP = "show Spark's and Airflow's own log lines here (default: in <home>/logs/pipelines.log)"
DEFAULT_STREAM = "events"
DEFAULT_JOB = "job"

Writes = bool | Callable[[argparse.Namespace], bool]
"""Whether a command changes state in the home: always, never, or depending on its arguments."""


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call; ``exclusive`` names the mutually exclusive group it belongs to, if any."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]
    exclusive: str | None = None


def arg(*flags: str, exclusive: str | None = None, **options: Any) -> Arg:
    return Arg(flags, options, exclusive)


@dataclass(frozen=True)
class ActionCommand:
    """A command that runs: ``handler`` is ``module.function`` taking ``(args, home, output)``."""

    name: str
    help: str
    handler: str
    args: tuple[Arg, ...] = ()
    writes: Writes = False


@dataclass(frozen=True)
class GroupCommand:
    """A command with subcommands (``pipelines stream create ...``)."""

    name: str
    help: str
    subcommands: tuple[ActionCommand, ...]


# ---------------------------------------------------------------------- argument types


def amount(unit: str, maximum: float | None = None, *, most: str = "") -> Callable[[str], float]:
    """A finite, non-negative number of ``unit``: ``nan`` or ``inf`` would wait forever; the error names the unit.

    ``maximum`` bounds it where a larger one cannot be used (``time.sleep`` and dates have ends); ``most`` says
    what that maximum is in words (``a day``).
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of {unit} >= 0, got {shown(text)}") from None
        if not math.isfinite(value) or value < 0:
            raise argparse.ArgumentTypeError(f"must be a finite number of {unit} >= 0, got {shown(text)}")
        if maximum is not None and value > maximum:
            said = f" ({most})" if most else ""
            most_text = f"{int(maximum):,}" if maximum == int(maximum) else f"{maximum:g}"
            raise argparse.ArgumentTypeError(f"must be at most {most_text} {unit}{said}, got {shown(text)}")
        return value

    parse.__name__ = f"number of {unit}"
    return parse


seconds = amount("seconds", MAX_WAIT_S, most="ten years")
"""A wait or a run time: ``time.sleep`` overflows past about 292 years (``demo --seconds 1e300`` after its wipe)."""


def count(minimum: int, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """A whole number in ASCII digits from ``minimum`` to ``maximum`` (by default the largest a 64-bit column holds:
    a version past it ended in Arrow's ``OverflowError``)."""

    def parse(text: str) -> int:
        value = whole_number(text, signed=True)
        digits = text.strip().lstrip("+")
        if value is None and digits.isascii() and digits.isdigit():  # more digits than any count has
            raise argparse.ArgumentTypeError(f"must be a whole number at most {maximum:,}, got {shown(text)}")
        if value is None:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {shown(text)}")
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be a whole number at most {maximum:,}, got {shown(text)}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def job_name(text: str) -> str:
    """A job's name as every table keys it (``core.ssp.validate_name``), refused before any table is read."""
    try:
        return validate_name("job", text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


job_name.__name__ = "job name"


def reason(text: str) -> str:
    """Why a model was planned, as every reason is held (``core.limits.check_reason``): refused before a table is
    read, a lock taken or the autosizer asked."""
    try:
        return check_reason(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


reason.__name__ = "reason"


def spark_master(text: str) -> str:
    """A master URL Spark starts with (``lifetime.master_problem``); whether its hosts answer is checked later."""
    problem = master_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


spark_master.__name__ = "Spark master"


def record_time(text: str) -> str:
    """A time with its zone, in the canonical form a job's ``start`` keeps (``core.start``)."""
    wanted = f"{shown(text)} is not a time with its zone, such as 2026-11-27T08:00:00Z"
    try:
        canonical = parse_start(text)
    except ConfigError as error:
        reason = str(error).removeprefix("start: ")
        raise argparse.ArgumentTypeError(wanted if "is not a start" in reason else reason) from None
    if start_time_ms(canonical) is None:
        raise argparse.ArgumentTypeError(wanted)
    return canonical


record_time.__name__ = "time"


def duration(text: str) -> float:
    """A positive age such as ``30m``, ``12h`` or ``7d``, in seconds (``core.adjunct.parse_duration``)."""
    try:
        return parse_duration(text, "AGE").total_seconds()
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("AGE ")) from None


duration.__name__ = "age"


def retention(text: str) -> int | None:
    """A stream's own retention: an age in ms, ``forever`` (-1) or ``default`` (None) (``core.segments``)."""
    try:
        return retention_ms(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).removeprefix("retention ")) from None


retention.__name__ = "retention"

RETENTION_HELP = (
    "the stream's own retention: an age (12h, 7d) that 'stream trim' and the stream_maintenance DAG apply, "
    "'forever' (the DAG never trims it) or 'default' (the DAG's older_than); on Kafka the topic's retention.ms "
    "(forever: -1; default: the broker's); on Kinesis its retention period (whole hours from 24h to 365d; "
    "default: 24h)"
)


# ---------------------------------------------------------------------- conditional writes


def _skip_writes(args: argparse.Namespace) -> bool:
    return not args.dry_run


def _plan_saves(args: argparse.Namespace) -> bool:
    return bool(args.save)


def _rescale_writes(args: argparse.Namespace) -> bool:
    return not args.dry_run or (args.factor or "").strip().lower() == "auto"  # auto records the autosizer's decision


def _watch_applies(args: argparse.Namespace) -> bool:
    return bool(args.apply)


def _autosize_records(args: argparse.Namespace) -> bool:
    return not args.no_record


# ---------------------------------------------------------------------- the table

SYSTEM = (
    arg("--system", default=EMBEDDED_SYSTEM, help="input system (default: the embedded log)"),
    arg("--settings", default=None, help="the system's settings as a JSON object (e.g. Kafka's bootstrap_servers)"),
)
JOB = arg("job", type=job_name)
GROUPER_NAMES = ", ".join(sorted(GROUPERS))

STREAM = GroupCommand(
    "stream",
    "input streams (the embedded log by default)",
    (
        ActionCommand(
            "create",
            "create a stream",
            "pipelines.cli.streams.create",
            (
                *SYSTEM,
                arg("name"),
                arg("--partitions", type=count(1), required=True),
                arg("--retention", type=retention, default=None, metavar="AGE", help=RETENTION_HELP),
            ),
            writes=True,
        ),
        ActionCommand(
            "alter",
            "set a stream's own retention (the embedded log's; a Kafka topic's retention.ms, as kafka-configs --alter; "
            "a Kinesis stream's retention period)",
            "pipelines.cli.streams.alter",
            (
                *SYSTEM,
                arg("name"),
                arg("--retention", type=retention, required=True, metavar="AGE", help=RETENTION_HELP),
            ),
            writes=True,
        ),
        ActionCommand(
            "produce",
            "append test records (JSON with a per-key sequence)",
            "pipelines.cli.streams.produce",
            (
                *SYSTEM,
                arg("name"),
                arg("--records", type=count(1), default=None, help="how many, at once (or --rate and --seconds)"),
                arg("--rate", type=count(1), default=None, help="records per second, continuously, for --seconds"),
                arg("--seconds", type=seconds, default=None, help="how long --rate produces"),
                arg("--keys", type=count(1), required=True),
                arg("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)"),
                # None: the producer's own chunk size (kept in the demo package, which loads only to produce)
                arg("--chunk", type=count(1), default=None, help="records per commit"),
            ),
            writes=True,
        ),
        ActionCommand(
            "expand",
            "grow a stream's partition count",
            "pipelines.cli.streams.expand",
            (*SYSTEM, arg("name"), arg("--partitions", type=count(1), required=True)),
            writes=True,
        ),
        ActionCommand(
            "describe",
            "partitions, positions and expansions of a stream",
            "pipelines.cli.streams.describe",
            (
                *SYSTEM,
                arg("name"),
                arg(
                    "--at",
                    type=record_time,
                    default=None,
                    metavar="TIME",
                    help="also each partition's first record at or after TIME (a time with its zone): where a job "
                    "created with 'start: TIME' begins, as kafka-get-offsets --time answers",
                ),
            ),
        ),
        ActionCommand(
            "trim",
            "retention for the embedded log: delete each partition's oldest files, as Kafka deletes old segments, "
            "keeping what a job of the home has not read",
            "pipelines.cli.streams.trim",
            (
                SYSTEM[0],  # to name the system's own retention when it is not the embedded log; no settings to use
                arg("name"),
                arg(
                    "--before",
                    type=record_time,
                    default=None,
                    metavar="TIME",
                    exclusive="when",
                    help="delete files whose every record is older than TIME (a time with its zone)",
                ),
                arg(
                    "--older-than",
                    type=duration,
                    default=None,
                    metavar="AGE",
                    exclusive="when",
                    help="the same with TIME = now - AGE (30m, 12h, 7d): Kafka's retention.ms, for a schedule; "
                    "without --before or --older-than, the stream's own retention ('stream alter --retention')",
                ),
                arg(
                    "--lose-unread",
                    action="store_true",
                    help="also delete records jobs of this home have not read (they stop until 'job skip-lost')",
                ),
                arg("--dry-run", action="store_true", help="show what would be deleted, change nothing"),
            ),
            writes=_skip_writes,
        ),
        ActionCommand(
            "compact",
            "merge each partition's runs of small files of the embedded log into one, offsets and order kept",
            "pipelines.cli.streams.compact",
            (
                arg("name"),
                arg(
                    "--target-mb",
                    type=count(1),
                    default=COMPACT_TARGET_BYTES // 2**20,
                    help=f"at most this many MiB per merged file (default {COMPACT_TARGET_BYTES // 2**20}; Kafka's "
                    "segment.bytes is 1 GiB)",
                ),
                arg(
                    "--max-span",
                    type=duration,
                    default=COMPACT_SPAN_MS / 1000,
                    metavar="AGE",
                    help="at most this much record time per merged file (default 1h, Kafka's segment.ms), so that "
                    "retention, which deletes whole files, stays as fine",
                ),
                arg("--dry-run", action="store_true", help="show what would be merged, change nothing"),
            ),
            writes=_skip_writes,
        ),
    ),
)

MODEL = GroupCommand(
    "model",
    "plan job models and migrate checkpoints",
    (
        ActionCommand(
            "plan",
            "print the job model for an input and elasticity factor",
            "pipelines.cli.models.plan",
            (
                arg(
                    "--partitions",
                    type=count(1, MAX_PARTITIONS),
                    help="input partitions (default: the embedded stream's count)",
                ),
                arg("--factor", default="1", help="elasticity factor X >= 1 (default 1)"),
                arg("--grouper", default="GroupByPartition", help=f"one of {GROUPER_NAMES}"),
                arg("--containers", type=count(1), default=1),
                arg("--stream", default=DEFAULT_STREAM),
                arg("--system", default=EMBEDDED_SYSTEM),
                arg("--settings", default=None, help="the system's settings as a JSON object"),
                arg(
                    "--job",
                    type=job_name,
                    default=DEFAULT_JOB,
                    help="plan on top of this job's active model, if it has one",
                ),
                arg("--save", action="store_true", help="store the plan in the control plane (not activated)"),
                arg(
                    "--reason",
                    type=reason,
                    default="planned from the CLI",
                    help=f"why the model was planned (with --save; one line, at most {MAX_REASON} characters)",
                ),
            ),
            writes=_plan_saves,
        ),
        ActionCommand(
            "migrate",
            "migrate a checkpoint map to a new factor / partition count",
            "pipelines.cli.models.migrate",
            (
                arg("--from", dest="source", required=True, help="JSON checkpoint map file ('-': stdin)"),
                arg("--to-factor", required=True, help="new elasticity factor X'"),
                arg("--partitions", type=count(1, MAX_PARTITIONS), help="new partition count (default: unchanged)"),
                arg("--stream", help="the stream that grew, when the map has several"),
                arg("--earliest", default="0", help="start offset of new partitions (default 0)"),
            ),
        ),
        ActionCommand(
            "import",
            "read a job model Samza serialized (hyphenated keys, keyBucket -1)",
            "pipelines.cli.models.import_samza",
            (
                arg("--samza", required=True, metavar="FILE", help="the Samza job model JSON ('-': stdin)"),
                arg("--job", help="the job's name (default: the model's job.name)"),
                arg("--version", type=count(1), default=1, help="the version it gets here (default 1)"),
            ),
        ),
        ActionCommand(
            "export",
            "write a stored job model the way Samza serializes it",
            "pipelines.cli.models.export_samza",
            (arg("--job", required=True), arg("--version", type=count(1), help="default: the active version")),
        ),
    ),
)

JOB_GROUP = GroupCommand(
    "job",
    "jobs in the control plane",
    (
        ActionCommand("list", "jobs with their active and latest versions", "pipelines.cli.jobs.list_jobs"),
        ActionCommand("show", "a job's active model and model history", "pipelines.cli.jobs.show", (JOB,)),
        ActionCommand(
            "checkpoints",
            "latest checkpoints of a job's model version",
            "pipelines.cli.jobs.checkpoints",
            (JOB, arg("--version", type=count(0), help="model version (default: the active one)")),
        ),
        ActionCommand(
            "compact",
            "rewrite a job's control-table files into a few and delete the rows no reader needs: superseded "
            "checkpoints, metrics past metrics_retention_hours (its running driver does this every 10 minutes)",
            "pipelines.cli.jobs.compact",
            (
                JOB,
                arg(
                    "--min-files",
                    type=count(1),
                    default=None,
                    help="leave a table with fewer of the job's files as it is (default: 50)",
                ),
            ),
            writes=True,
        ),
        ActionCommand(
            "skip-lost",
            "move a job past records its input deleted before the job read them (Kafka's retention, 'stream trim "
            "--lose-unread'): a new model "
            "version starting at each such partition's earliest, the skipped ranges in its history",
            "pipelines.cli.jobs.skip_lost",
            (JOB, arg("--dry-run", action="store_true", help="list the ranges that would be skipped, change nothing")),
            writes=_skip_writes,
        ),
        ActionCommand(
            "create",
            "register a job from its YAML config: model v1, start checkpoints, tables",
            "pipelines.cli.jobs.create",
            (
                arg("job", type=job_name, help="the job's name (must match the config's 'name')"),
                arg("--config", required=True, help="job YAML, e.g. include/jobs/enrichment.yaml"),
            ),
            writes=True,
        ),
    ),
)

STATUS = ActionCommand(
    "status",
    "a job's throughput, lag, batch durations and scaling steps over time, its virtual tasks and inputs",
    "pipelines.cli.observe.status",
    (
        JOB,
        arg(
            "--watch",
            nargs="?",
            type=amount("seconds", MAX_WATCH_S, most="a day"),
            const=5.0,
            metavar="SECONDS",
            help="refresh every SECONDS (5) until Ctrl-C",
        ),
        arg(
            "--minutes",
            type=amount("minutes", MAX_MINUTES, most="ten years"),
            default=60.0,
            help="how far back the figures go (default 60)",
        ),
        arg("--export", metavar="FILE", help="also write the plots and tables to FILE.html (or FILE.png)"),
    ),
)

METRICS = ActionCommand(
    "metrics",
    "every job's lag, records/s, factor, virtual tasks, driver and last switch as OpenMetrics, for Prometheus",
    "pipelines.cli.observe.metrics",
    (
        arg("--serve", action="store_true", help="serve them at http://HOST:PORT/metrics until Ctrl-C (else print)"),
        arg("--host", default="127.0.0.1", help="address to listen on with --serve (default 127.0.0.1)"),
        arg(
            "--port",
            type=count(0, 65535),
            default=9464,
            help="port to listen on with --serve (default 9464; 0: any free port, printed)",
        ),
    ),
)

STORE = GroupCommand(
    "store",
    "a job's adjunct data stores",
    (
        ActionCommand(
            "list",
            "each store's position, size, version, validity, last bootstrap",
            "pipelines.cli.stores.list_stores",
            (JOB,),
        ),
        ActionCommand(
            "verify",
            "compare a sample of lookups with the stream's latest value per key",
            "pipelines.cli.stores.verify",
            (JOB, arg("store"), arg("--sample", type=count(1), default=1000)),
        ),
    ),
)

RUN = ActionCommand(
    "run",
    "run a job's active model with spark-submit",
    "pipelines.cli.ops.run",
    (
        JOB,
        arg("--available-now", action="store_true", exclusive="mode", help="process what is there, then exit"),
        arg("--continuous", action="store_true", exclusive="mode", help="run until stopped (the default)"),
        arg("--master", type=spark_master, default="local[*]", help="Spark master (default local[*])"),
        arg(
            "--detach",
            action="store_true",
            help="run in the background: returns once the driver is up, fails if it exits first; "
            "logs in <home>/run/JOB.log",
        ),
    ),
    writes=True,
)

DEMO = ActionCommand(
    "demo",
    "the end-to-end demo on the embedded log (wipes --home)",
    "pipelines.cli.ops.demo",
    (
        arg("--rate", type=count(1), default=900, help="records produced per second, continuously"),
        arg("--seconds", type=seconds, default=10.0, help="how long the job runs on each model"),
        arg("--keys", type=count(1), default=200),
        arg("--latency-ms", type=amount("milliseconds"), default=2.0, help="simulated remote call per record"),
        arg("--master", type=spark_master, default="local[8]"),
        arg(
            "--input",
            choices=("deltalog", "kafka", "kinesis"),
            default="deltalog",
            help="the embedded log; kafka: a local Apache Kafka broker (KRaft, one node) started by the demo, with "
            "the expansion done by CreatePartitions on the live topic; kinesis: kinesis-mock started on loopback",
        ),
    ),
    writes=True,
)

VERIFY = ActionCommand(
    "verify",
    "data quality: no loss, no duplicates, per-key order, routing (exit 2 on failure)",
    "pipelines.cli.observe.verify",
    (
        JOB,
        arg("--event", help="validate the batches around this scaling event (id or prefix), not the whole run"),
        arg("--sequence", help="per-key sequence column proving order across partitions (demo: seq)"),
    ),
    writes=True,
)

RESCALE = ActionCommand(
    "rescale",
    "change a job's elasticity factor: lock, migrate, activate, restart, catch up, verify",
    "pipelines.cli.ops.rescale",
    (
        JOB,
        arg("--factor", help='target elasticity factor, or "auto" to ask the autosizer (default: the one now)'),
        arg(
            "--reason",
            type=reason,
            default="rescale from the CLI",
            help=f"recorded with the new model (one line, at most {MAX_REASON} characters)",
        ),
        arg("--grouper", help=f"switch grouper too: one of {GROUPER_NAMES}"),
        arg(
            "--config",
            help="a new version of the job's YAML: another function or options, columns added to its output or "
            "state (the factor stays unless --factor says otherwise)",
        ),
        arg("--dry-run", action="store_true", help="plan and print the new model, change nothing"),
        arg(
            "--lock-wait",
            type=seconds,
            default=0.0,
            help="seconds to wait for another scaling step's lock (default 0: refuse), then plan again on the model "
            "it left (skipped, exit 0, when that already runs the factor)",
        ),
        arg(
            "--master",
            type=spark_master,
            help="Spark master of a catch-up run (default $PIPELINES_SPARK_MASTER or local[*])",
        ),
        arg("--sequence", help="per-key sequence column for the order check (default: seq if emitted)"),
    ),
    writes=_rescale_writes,
)

WATCH = ActionCommand(
    "watch",
    "compare every job's inputs with its model; --apply absorbs expansions (exit 2 on a change it cannot)",
    "pipelines.cli.ops.watch",
    (
        arg("--apply", action="store_true", help="absorb each expansion, keeping keys with their tasks (SEP-5)"),
        arg("--master", type=spark_master, help="Spark master of catch-up runs"),
    ),
    writes=_watch_applies,
)

AUTOSIZE = ActionCommand(
    "autosize",
    "ask the job's autosize policy for a factor (recorded; does not rescale)",
    "pipelines.cli.ops.autosize",
    (JOB, arg("--no-record", action="store_true", help="do not append the decision to autosize_decisions")),
    writes=_autosize_records,
)

STOP = ActionCommand(
    "stop",
    "stop a running job at its next batch boundary",
    "pipelines.cli.ops.stop",
    (JOB, arg("--no-wait", action="store_true")),
    writes=True,
)

SQL = ActionCommand(
    "sql",
    "a read-only Spark SQL query over the home: control tables by name, stream_<name>, sink_<table>",
    "pipelines.cli.observe.sql",
    (
        arg("query", help="e.g. \"SELECT * FROM checkpoints WHERE job = 'enrichment'\""),
        arg(
            "--master",
            type=spark_master,
            default="local[2]",
            help="Spark master of the query's session (default local[2])",
        ),
    ),
)

LOCK = GroupCommand(
    "lock",
    "a job's scaling lock: who holds it, and the operator's release",
    (
        ActionCommand(
            "show", "who holds the job's scaling lock, since when, until when", "pipelines.cli.locks.show", (JOB,)
        ),
        ActionCommand(
            "release",
            "release a lock whose holder is dead on another machine (recorded)",
            "pipelines.cli.locks.release",
            (
                JOB,
                arg(
                    "--yes",
                    action="store_true",
                    help="required to release a held lock: its holder's operation will not finish its steps",
                ),
            ),
            writes=True,
        ),
    ),
)

COMMANDS: tuple[ActionCommand | GroupCommand, ...] = (
    STREAM,
    MODEL,
    JOB_GROUP,
    STATUS,
    METRICS,
    STORE,
    RUN,
    DEMO,
    VERIFY,
    RESCALE,
    WATCH,
    AUTOSIZE,
    STOP,
    SQL,
    LOCK,
)
"""In ``--help`` order."""


def actions() -> Iterator[tuple[str, ActionCommand]]:
    """Every runnable command with its full name (``"stream create"``, ``"status"``), in table order."""
    for entry in COMMANDS:
        if isinstance(entry, GroupCommand):
            for command in entry.subcommands:
                yield f"{entry.name} {command.name}", command
        else:
            yield entry.name, entry
