"""``python -m pipelines``: operate streams, job models and the control plane from a shell.

Every user mistake is a ``PipelinesError`` and ends as one ``error: ...`` line
on stderr with exit code 2 (argparse's own usage errors use 2 as well), so
scripts and Airflow's BashOperator can tell "fix your input" from a crash,
which keeps its traceback. ``--json`` prints machine-readable output on
stdout; progress and notes always go to stderr so stdout stays parseable.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from pipelines.control.home import Home, check_writable, resolve_home
from pipelines.core.checkpoints import CheckpointMap, migrate_checkpoints
from pipelines.core.groupers import GROUPERS, plan_job_model
from pipelines.core.hashing import validate_factor
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream, SystemStreamPartition, validate_name
from pipelines.demo.producer import PRODUCE_CHUNK, produce
from pipelines.errors import ConfigError, ModelError, PartitionChangeError, PipelinesError, StreamError

EMBEDDED_SYSTEM = "deltalog"
VERBOSE_HELP = "show Spark's and Airflow's own log lines here (default: in <home>/logs/pipelines.log)"
DEFAULT_STREAM = "events"
DEFAULT_JOB = "job"


class Output:
    """Prints either JSON or a short human table, so every command decides once what it shows."""

    def __init__(self, as_json: bool, out: TextIO, err: TextIO) -> None:
        self.as_json = as_json
        self.out = out
        self.err = err

    def emit(self, data: Any, human: Callable[[], str]) -> None:
        if self.as_json:
            json.dump(_plain(data), self.out, indent=2, sort_keys=False)
            self.out.write("\n")
        else:
            self.out.write(human().rstrip("\n") + "\n")

    def note(self, message: str) -> None:
        self.err.write(message + "\n")
        self.err.flush()


# ---------------------------------------------------------------------- argument types


def _seconds(text: str) -> float:
    """A finite, non-negative number of seconds: ``nan`` or ``inf`` would wait forever."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds >= 0, got {text!r}")
    return value


def _count(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {value}")
        return value

    parse.__name__ = f"whole number >= {minimum}"
    return parse


def build_parser() -> argparse.ArgumentParser:
    # Global options are accepted before and after the command; the subcommands' copies default to
    # SUPPRESS so a value given before the command is not reset by the subparser.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--home", default=argparse.SUPPRESS, help="state directory (default: $PIPELINES_HOME)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="machine-readable output")
    common.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)

    parser = argparse.ArgumentParser(
        prog="pipelines", description="Elastic stream processing on Spark: streams, job models, control plane."
    )
    parser.add_argument(
        "--home",
        default=None,
        help="state directory (default: $PIPELINES_HOME, else ./.pipelines-home)",
    )
    parser.add_argument("--json", action="store_true", default=False, help="machine-readable output on stdout")
    parser.add_argument("--verbose", action="store_true", default=False, help=VERBOSE_HELP)
    groups = parser.add_subparsers(
        dest="group", required=True, metavar="{stream,model,job,status,run,stop,rescale,watch,autosize,verify,demo}"
    )

    system = argparse.ArgumentParser(add_help=False)
    system.add_argument("--system", default=EMBEDDED_SYSTEM, help="input system (default: the embedded log)")
    system.add_argument(
        "--settings", default=None, help="the system's settings as a JSON object (e.g. Kafka's bootstrap_servers)"
    )
    stream = groups.add_parser("stream", help="input streams (the embedded log by default)", parents=[common])
    sc = stream.add_subparsers(dest="command", required=True)
    p = sc.add_parser("create", help="create a stream", parents=[common, system])
    p.add_argument("name")
    p.add_argument("--partitions", type=_count(1), required=True)
    p.set_defaults(func=cmd_stream_create)
    p = sc.add_parser("produce", help="append test records (JSON with a per-key sequence)", parents=[common, system])
    p.add_argument("name")
    p.add_argument("--records", type=_count(1), required=True)
    p.add_argument("--keys", type=_count(1), required=True)
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    p.add_argument("--chunk", type=_count(1), default=PRODUCE_CHUNK, help="records per commit")
    p.set_defaults(func=cmd_stream_produce)
    p = sc.add_parser("expand", help="grow a stream's partition count", parents=[common, system])
    p.add_argument("name")
    p.add_argument("--partitions", type=_count(1), required=True)
    p.set_defaults(func=cmd_stream_expand)
    p = sc.add_parser("describe", help="partitions, positions and expansions of a stream", parents=[common, system])
    p.add_argument("name")
    p.set_defaults(func=cmd_stream_describe)

    model = groups.add_parser("model", help="plan job models and migrate checkpoints", parents=[common])
    mc = model.add_subparsers(dest="command", required=True)
    p = mc.add_parser("plan", help="print the job model for an input and elasticity factor", parents=[common])
    p.add_argument("--partitions", type=_count(1), help="input partitions (default: the embedded stream's count)")
    p.add_argument("--factor", default="1", help="elasticity factor X >= 1 (default 1)")
    p.add_argument("--grouper", default="GroupByPartition", help=f"one of {', '.join(sorted(GROUPERS))}")
    p.add_argument("--containers", type=_count(1), default=1)
    p.add_argument("--stream", default=DEFAULT_STREAM)
    p.add_argument("--system", default=EMBEDDED_SYSTEM)
    p.add_argument("--settings", default=None, help="the system's settings as a JSON object")
    p.add_argument("--job", default=DEFAULT_JOB, help="plan on top of this job's active model, if it has one")
    p.add_argument("--save", action="store_true", help="store the plan in the control plane (not activated)")
    p.add_argument("--reason", default="planned from the CLI", help="why the model was planned (with --save)")
    p.set_defaults(func=cmd_model_plan)
    p = mc.add_parser("migrate", help="migrate a checkpoint map to a new factor / partition count", parents=[common])
    p.add_argument("--from", dest="source", required=True, help="JSON checkpoint map file ('-': stdin)")
    p.add_argument("--to-factor", required=True, help="new elasticity factor X'")
    p.add_argument("--partitions", type=_count(1), help="new partition count (default: unchanged)")
    p.add_argument("--stream", help="the stream that grew, when the map has several")
    p.add_argument("--earliest", default="0", help="start offset of new partitions (default 0)")
    p.set_defaults(func=cmd_model_migrate)
    p = mc.add_parser(
        "import", help="read a job model Samza serialized (hyphenated keys, keyBucket -1)", parents=[common]
    )
    p.add_argument("--samza", required=True, metavar="FILE", help="the Samza job model JSON ('-': stdin)")
    p.add_argument("--job", help="the job's name (default: the model's job.name)")
    p.add_argument("--version", type=_count(1), default=1, help="the version it gets here (default 1)")
    p.set_defaults(func=cmd_model_import)
    p = mc.add_parser("export", help="write a stored job model the way Samza serializes it", parents=[common])
    p.add_argument("--job", required=True)
    p.add_argument("--version", type=_count(1), help="default: the active version")
    p.set_defaults(func=cmd_model_export)

    job = groups.add_parser("job", help="jobs in the control plane", parents=[common])
    jc = job.add_subparsers(dest="command", required=True)
    p = jc.add_parser("list", help="jobs with their active and latest versions", parents=[common])
    p.set_defaults(func=cmd_job_list)
    p = jc.add_parser("show", help="a job's active model and model history", parents=[common])
    p.add_argument("job")
    p.set_defaults(func=cmd_job_show)
    p = jc.add_parser("checkpoints", help="latest checkpoints of a job's model version", parents=[common])
    p.add_argument("job")
    p.add_argument("--version", type=_count(0), help="model version (default: the active one)")
    p.set_defaults(func=cmd_job_checkpoints)
    p = jc.add_parser(
        "create", help="register a job from its YAML config: model v1, start checkpoints, tables", parents=[common]
    )
    p.add_argument("job", help="the job's name (must match the config's 'name')")
    p.add_argument("--config", required=True, help="job YAML, e.g. include/jobs/enrichment.yaml")
    p.set_defaults(func=cmd_job_create)

    p = groups.add_parser(
        "status",
        help="a job's throughput, lag, batch durations and scaling steps over time, its virtual tasks and inputs",
        parents=[common],
    )
    p.add_argument("job")
    p.add_argument(
        "--watch", nargs="?", type=_seconds, const=5.0, metavar="SECONDS", help="refresh every SECONDS (5) until Ctrl-C"
    )
    p.add_argument("--minutes", type=_seconds, default=60.0, help="how far back the figures go (default 60)")
    p.add_argument("--export", metavar="FILE", help="also write the plots and tables to FILE.html (or FILE.png)")
    p.set_defaults(func=cmd_status)

    store = groups.add_parser("store", help="a job's adjunct data stores", parents=[common])
    stc = store.add_subparsers(dest="command", required=True)
    p = stc.add_parser("list", help="each store's position, size, version, validity, last bootstrap", parents=[common])
    p.add_argument("job")
    p.set_defaults(func=cmd_store_list)
    p = stc.add_parser(
        "verify", help="compare a sample of lookups with the stream's latest value per key", parents=[common]
    )
    p.add_argument("job")
    p.add_argument("store")
    p.add_argument("--sample", type=_count(1), default=1000)
    p.set_defaults(func=cmd_store_verify)

    p = groups.add_parser("run", help="run a job's active model with spark-submit", parents=[common])
    p.add_argument("job")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--available-now", action="store_true", help="process what is there, then exit")
    mode.add_argument("--continuous", action="store_true", help="run until stopped (the default)")
    p.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    p.add_argument("--detach", action="store_true", help="run in the background; logs in <home>/run/JOB.log")
    p.set_defaults(func=cmd_run)
    p = groups.add_parser("demo", help="the end-to-end demo on the embedded log (wipes --home)", parents=[common])
    p.add_argument("--rate", type=_count(1), default=1500, help="records produced per second, continuously")
    p.add_argument("--seconds", type=_seconds, default=12.0, help="how long the job runs on each model")
    p.add_argument("--keys", type=_count(1), default=200)
    p.add_argument("--latency-ms", type=_seconds, default=2.0, help="simulated remote call per record")
    p.add_argument("--master", default="local[8]")
    p.add_argument(
        "--input",
        choices=("deltalog", "kafka", "kinesis"),
        default="deltalog",
        help="the embedded log; kafka: a local Apache Kafka broker (KRaft, one node) started by the demo, with "
        "the expansion done by CreatePartitions on the live topic; kinesis: kinesis-mock started on loopback",
    )
    p.set_defaults(func=cmd_demo)
    p = groups.add_parser(
        "verify",
        help="data quality: no loss, no duplicates, per-key order, routing (exit 2 on failure)",
        parents=[common],
    )
    p.add_argument("job")
    p.add_argument("--event", help="validate the batches around this scaling event (id or prefix), not the whole run")
    p.add_argument("--sequence", help="per-key sequence column proving order across partitions (demo: seq)")
    p.set_defaults(func=cmd_verify)
    p = groups.add_parser(
        "rescale",
        help="change a job's elasticity factor: lock, migrate, activate, restart, catch up, verify",
        parents=[common],
    )
    p.add_argument("job")
    p.add_argument("--factor", required=True, help='target elasticity factor, or "auto" to ask the autosizer')
    p.add_argument("--reason", default="rescale from the CLI", help="recorded with the new model")
    p.add_argument("--grouper", help=f"switch grouper too: one of {', '.join(sorted(GROUPERS))}")
    p.add_argument("--dry-run", action="store_true", help="plan and print the new model, change nothing")
    p.add_argument("--lock-wait", type=_seconds, default=0.0, help="seconds to wait for another scaling step")
    p.add_argument("--master", help="Spark master of a catch-up run (default $PIPELINES_SPARK_MASTER or local[*])")
    p.add_argument("--sequence", help="per-key sequence column for the order check (default: seq if emitted)")
    p.set_defaults(func=cmd_rescale)
    p = groups.add_parser(
        "watch",
        help="compare every job's inputs with its model; --apply absorbs expansions (exit 2 on a change it cannot)",
        parents=[common],
    )
    p.add_argument("--apply", action="store_true", help="absorb each expansion, keeping keys with their tasks (SEP-5)")
    p.add_argument("--master", help="Spark master of catch-up runs")
    p.set_defaults(func=cmd_watch)
    p = groups.add_parser(
        "autosize", help="ask the job's autosize policy for a factor (recorded; does not rescale)", parents=[common]
    )
    p.add_argument("job")
    p.add_argument("--no-record", action="store_true", help="do not append the decision to autosize_decisions")
    p.set_defaults(func=cmd_autosize)
    p = groups.add_parser("stop", help="stop a running job at its next batch boundary", parents=[common])
    p.add_argument("job")
    p.add_argument("--no-wait", action="store_true")
    p.set_defaults(func=cmd_stop)
    p = groups.add_parser(
        "sql",
        help="a read-only Spark SQL query over the home: control tables by name, stream_<name>, sink_<table>",
        parents=[common],
    )
    p.add_argument("query", help="e.g. \"SELECT * FROM checkpoints WHERE job = 'enrichment'\"")
    p.add_argument("--master", default="local[2]", help="Spark master of the query's session (default local[2])")
    p.set_defaults(func=cmd_sql)
    lock = groups.add_parser("lock", help="a job's scaling lock: who holds it, and the operator's release")
    lc = lock.add_subparsers(dest="command", required=True)
    p = lc.add_parser("show", help="who holds the job's scaling lock, since when, until when", parents=[common])
    p.add_argument("job")
    p.set_defaults(func=cmd_lock_show)
    p = lc.add_parser(
        "release", help="release a lock whose holder is dead on another machine (recorded)", parents=[common]
    )
    p.add_argument("job")
    p.add_argument("--yes", action="store_true", help="required: the holder's operation will not finish its steps")
    p.set_defaults(func=cmd_lock_release)
    return parser


def cmd_status(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.observe.status import status

    job = validate_name("job", args.job)
    status(home, job, output, minutes=args.minutes, watch=args.watch, export=args.export)


def cmd_job_create(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.jobs.config import JobConfig
    from pipelines.operations.jobs import create_job

    config = JobConfig.load(args.config)
    if config.name != args.job:
        raise ConfigError(f"{args.config} configures job {config.name!r}, not {args.job!r}")
    model = create_job(home, config)
    output.emit(
        {"job": model.job_name, "version": model.version, "factor": model.elasticity_factor, "tasks": model.task_count},
        lambda: (
            f"job {model.job_name}: model v{model.version} active, factor {model.elasticity_factor}, "
            f"{model.task_count} virtual tasks"
        ),
    )


def cmd_run(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.runtime import launcher

    result = launcher.run(home, args.job, available_now=args.available_now, master=args.master, detach=args.detach)
    if args.detach:
        output.emit({"job": args.job, "pid": result}, lambda: f"job {args.job} running as pid {result}")
    elif result != 0:
        raise launcher.failure(home, args.job) or PipelinesError(f"job {args.job} driver exited with code {result}")


def cmd_demo(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.demo.run import main as demo

    if args.home is None:  # the demo wipes its home: never the default one by accident
        home = Home(home.root / "demo")
    if args.input == "kinesis":
        from pipelines.demo.kinesis import main as kinesis_demo

        passed = kinesis_demo(home, args.rate, args.seconds, args.keys, args.latency_ms, args.master) == 0
    else:
        passed = demo(home, args.rate, args.seconds, args.keys, args.latency_ms, args.master, args.input) == 0
    if not passed:
        raise PipelinesError("the demo's verification failed; see the table above")


def cmd_verify(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.quality.report import run_quality

    report = run_quality(home, validate_name("job", args.job), args.event, sequence=args.sequence)
    output.emit(
        {
            "job": report.job,
            "window": report.window,
            "success": report.success,
            "checks": report.results,
            "data_docs": str(report.docs_index) if report.docs_index else None,
        },
        report.summary,
    )
    if not report.success:
        raise PipelinesError(f"data quality of job {report.job} ({report.window}) failed; see the checks above")


def _resolve_factor(home: Home, job: str, factor: str, reason: str, output: Output) -> tuple[object, str]:
    if factor.strip().lower() != "auto":
        return factor, reason
    from pipelines.control.locks import ScalingInProgressError
    from pipelines.core.autosize import SKIP
    from pipelines.operations.autosize import evaluate

    decision = evaluate(home, validate_name("job", job))
    if decision.action == SKIP:
        raise ScalingInProgressError(f"the autosizer {'; '.join(decision.reasons)}; try again when it is done")
    output.note(f"autosizer: {decision.action} to factor {decision.factor}: " + "; ".join(decision.reasons))
    return decision.factor, f"{reason} (auto: {'; '.join(decision.reasons)})"


def cmd_rescale(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.operations import scaling

    factor, reason = _resolve_factor(home, args.job, args.factor, args.reason, output)
    request = scaling.ScalingRequest(validate_name("job", args.job), factor, reason, grouper=args.grouper)  # type: ignore[arg-type]
    summary = scaling.plan(home, request)
    if not args.dry_run and not summary["changes"]:
        scaling.settle_abandoned(home, request.job, say=output.note)
    if args.dry_run or not summary["changes"]:
        output.emit(
            {"applied": False, "plan": summary},
            lambda: (
                "\n".join(f"{k:>14}: {_text(v)}" for k, v in summary.items())
                + (
                    "\n(dry run: nothing changed)"
                    if args.dry_run
                    else "\n(the job already runs this model: nothing to do)"
                )
            ),
        )
        return
    result = scaling.run_all(
        home, request, sequence=args.sequence, master=args.master, lock_wait_s=args.lock_wait, say=output.note
    )
    output.emit(
        {"applied": True, **result},
        lambda: (
            f"job {args.job}: {result['status']}, "
            + ", ".join(f"{k} {result.get(k)}" for k in ("downtime_s", "records_replayed", "caught_up_s", "dq"))
        ),
    )
    if result["status"] != "verified":
        raise PipelinesError(f"rescale of {args.job} ended {result['status']}; see the steps above")


def cmd_watch(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.operations import repartition, scaling

    changes = repartition.detect(home)
    results = []
    if args.apply:
        repartition.settle_unchanged(home, changes, say=output.note)
    for change in changes:
        if args.apply and change.error is None and change.busy is None:
            results.append(scaling.run_all(home, change.request(), master=args.master, say=output.note))
    output.emit(
        {"changes": [c.to_dict() for c in changes], "absorbed": results},
        lambda: (
            "\n".join(
                f"{c.job}: {c.stream} {c.before} -> {c.after} partitions: "
                + (f"REFUSED: {c.error}" if c.error else f"busy: {c.busy}" if c.busy else "absorbable")
                for c in changes
            )
            or "every job's inputs match its active model"
        ),
    )
    refused = [c for c in changes if c.error]
    if refused:
        raise PartitionChangeError("; ".join(f"{c.job}: {c.error}" for c in refused))


def cmd_autosize(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.operations.autosize import evaluate

    decision = evaluate(home, validate_name("job", args.job), record=not args.no_record)
    output.emit(
        {"job": args.job, **decision.to_dict()},
        lambda: f"{args.job}: {decision.action} -> factor {decision.factor}\n  " + "\n  ".join(decision.reasons),
    )


def cmd_stop(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.runtime import launcher

    stopped = launcher.stop(home, args.job, wait=not args.no_wait)
    output.emit(
        {"job": args.job, "stopped": stopped},
        lambda: f"job {args.job}: " + ("stopped" if stopped else "stop requested"),
    )


def cmd_sql(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.observe.sql import register, run_query, sql_session

    with sql_session(args.master) as spark:
        register(spark, home)
        columns, rows = run_query(spark, args.query)
    output.emit(
        [dict(zip(columns, row, strict=True)) for row in rows],
        lambda: (
            _table(columns, [["NULL" if v is None else v for v in row] for row in rows])
            + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
        ),
    )


def cmd_lock_show(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.control.locks import ScalingLock, dead_process_owner

    state = ScalingLock(home).state(validate_name("job", args.job))
    if state is None:
        output.emit({"job": args.job, "status": "never taken", "held": False}, lambda: f"{args.job}: never taken")
        return
    dead = state.held and dead_process_owner(state.owner)
    data = {**{k: str(v) for k, v in vars(state).items()}, "held": state.held, "holder_dead": dead}

    def human() -> str:
        if not state.held:
            return f"{args.job}: free ({state.status} by {state.owner} at {state.at:%Y-%m-%d %H:%M:%S} UTC)"
        note = "; its process is gone, the next operation takes it over" if dead else ""
        return f"{args.job}: {state.describe()}{note}"

    output.emit(data, human)


def cmd_lock_release(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.control.locks import ScalingLock, process_owner

    if not args.yes:
        raise ConfigError(
            "releasing another holder's lock lets a second operation start beside it; make sure the holder is dead "
            "(pipelines lock show JOB names its host and pid) and add --yes"
        )
    job = validate_name("job", args.job)
    released = ScalingLock(home).force_release(job, by=process_owner("cli"))
    if released is None:
        output.emit({"job": job, "released": None}, lambda: f"{job}: the lock is not held; nothing to release")
        return
    output.emit(
        {"job": job, "released": released.owner, "operation": released.operation},
        lambda: f"{job}: released the lock {released.owner} held for {released.operation!r}",
    )


def main(argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    output = Output(args.json, out, err)
    try:
        home = resolve_home(args.home)
        if _writes(args):
            check_writable(home)
        with _libraries_log(home, args.verbose):  # Spark's and Airflow's own lines: the home's log file
            args.func(args, home, output)
    except PipelinesError as e:
        return _fail(output, e.code, str(e))
    except OSError as e:  # the home or a file cannot be read or written: the user's to fix, not a bug
        where = f" ({e.filename})" if e.filename else ""
        return _fail(output, "io", f"{e.strerror or e}{where}")
    except KeyboardInterrupt:
        err.write("interrupted\n")
        return 130
    except BrokenPipeError:  # `pipelines ... | head`: the reader is gone, nothing to report
        if out is sys.stdout:  # keep Python from complaining again when it flushes stdout at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0


def _libraries_log(home: Home, verbose: bool) -> contextlib.AbstractContextManager[object]:
    """Unless --verbose, the libraries' log lines go to ``<home>/logs/pipelines.log`` (``runtime.logs``)."""
    if verbose:
        return contextlib.nullcontext()
    from pipelines.runtime.logs import quiet

    return quiet(home)


def _writes(args: argparse.Namespace) -> bool:
    """Whether the command changes state in the home: those are refused up front on a home they cannot write."""
    func = args.func
    if func in (cmd_model_plan,):
        return bool(args.save)
    if func is cmd_rescale:
        return not args.dry_run or args.factor.strip().lower() == "auto"  # auto records the autosizer's decision
    if func is cmd_watch:
        return bool(args.apply)
    if func is cmd_autosize:
        return not args.no_record
    return func in (
        cmd_stream_create,
        cmd_stream_produce,
        cmd_stream_expand,
        cmd_job_create,
        cmd_run,
        cmd_stop,
        cmd_verify,
        cmd_lock_release,
        cmd_demo,
    )


def _fail(output: Output, code: str, message: str) -> int:
    """``error: ...`` on stderr and exit 2; with ``--json`` also ``{"error": code, "message": ...}`` on stdout."""
    output.err.write(f"error: {message}\n")
    if output.as_json:
        json.dump({"error": code, "message": message}, output.out)
        output.out.write("\n")
    return 2


# ---------------------------------------------------------------------- stream


def _system(args: argparse.Namespace, home: Home) -> Any:
    """The stream commands' input system, imported late: model and job commands must work without it."""
    from pipelines.systems.registry import open_system

    return open_system(validate_name("system", args.system), home, _settings(args))


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    if args.settings:
        try:
            settings = json.loads(args.settings)
        except ValueError as e:
            raise ConfigError(
                f'--settings must be a JSON object, e.g. \'{{"bootstrap_servers": "host:9092"}}\': {e}'
            ) from None
        if not isinstance(settings, dict):
            raise ConfigError(f"--settings must be a JSON object, got {type(settings).__name__}")
    return settings


def cmd_stream_create(args: argparse.Namespace, home: Home, output: Output) -> None:
    system = _system(args, home)
    _show_stream(system.create(validate_name("stream", args.name), args.partitions), output)


def cmd_stream_expand(args: argparse.Namespace, home: Home, output: Output) -> None:
    system = _system(args, home)
    _show_stream(system.expand(validate_name("stream", args.name), args.partitions), output)


def cmd_stream_describe(args: argparse.Namespace, home: Home, output: Output) -> None:
    _show_stream(_system(args, home).describe(validate_name("stream", args.name)), output)


def cmd_stream_produce(args: argparse.Namespace, home: Home, output: Output) -> None:
    summary = produce(
        _system(args, home),
        home,
        validate_name("stream", args.name),
        args.records,
        args.keys,
        args.seed,
        chunk=args.chunk,
        progress=output.note,
    )
    output.emit(
        summary,
        lambda: (
            f"produced {summary['records']} records over {summary['keys']} keys to {summary['stream']} "
            f"(seed {summary['seed']})\n"
            + _table(
                ["PARTITION", "PRODUCED", "END"],
                [[p, summary["per_partition"].get(p, 0), end] for p, end in sorted(summary["end_offsets"].items())],
            )
        ),
    )


def _show_stream(meta: Any, output: Output) -> None:
    def human() -> str:
        lines = [f"stream {meta.system}.{meta.stream}: {len(meta.partitions)} partitions"]
        lines.append(
            _table(
                ["PARTITION", "EARLIEST", "END"],
                [[p.partition, p.earliest, p.end] for _, p in sorted(meta.partitions.items())],
            )
        )
        for e in meta.expansions:
            ends = ", ".join(f"{p}:{o}" for p, o in sorted(e.end_offsets.items()))
            lines.append(f"expanded {e.from_partitions} -> {e.to_partitions} at {_text(e.at)} (old ends {ends})")
        return "\n".join(lines)

    output.emit(meta, human)


# ---------------------------------------------------------------------- model


def cmd_model_plan(args: argparse.Namespace, home: Home, output: Output) -> None:
    factor = validate_factor(args.factor)  # bad input is reported before the Delta libraries load
    job = validate_name("job", args.job)
    stream = SystemStream(validate_name("system", args.system), validate_name("stream", args.stream))
    from pipelines.control import ControlPlane

    partitions = args.partitions
    if partitions is None or args.save:
        try:
            actual = _system(args, home).describe(stream.stream).partition_count
        except StreamError as e:
            hint = "" if args.save else "; give --partitions N to plan without a stream"
            raise StreamError(f"{e}{hint}") from None
        if partitions is None:
            partitions = actual
        elif partitions != actual:
            raise PartitionChangeError(
                f"--partitions {partitions} is not the {actual} partitions {stream} has; a saved model must read "
                "the stream as it is (plan without --save to explore other counts)"
            )
    cp = ControlPlane(home)
    latest = cp.job_models.latest_version(job)
    previous = cp.job_models.active(job) if cp.job_models.active_version(job) is not None else None
    version = 1 if latest is None else latest + 1
    model = plan_job_model(
        job,
        version,
        {stream: partitions},
        factor=factor,
        grouper=args.grouper,
        containers=args.containers,
        previous=previous,
    )
    if args.save:
        from pipelines import planning
        from pipelines.systems.registry import JobSystems

        old = cp.checkpoints.latest(job, previous.version) if previous is not None else None
        settings = {stream.system: _settings(args)}
        with JobSystems(home, settings) as systems:
            start = planning.start_positions(systems, old, model)
        planning.save(home, planning.VersionPlan(previous, model, start), args.reason)
        output.note(f"saved {job} version {version} (planned, not active) with its start checkpoints")
    output.emit(model.to_json(), lambda: _model_text(model, previous, saved=args.save))


def cmd_model_migrate(args: argparse.Namespace, home: Home, output: Output) -> None:
    old = _read_checkpoint_map(args.source)
    factor = validate_factor(args.to_factor)
    counts = _partition_counts(old)
    new_counts = dict(counts)
    if args.partitions is not None:
        target = _grown_stream(counts, args.stream)
        if args.partitions < counts[target]:
            raise PartitionChangeError(
                f"--partitions {args.partitions} is fewer than the {counts[target]} partitions of {target} in the "
                "checkpoint map; partitions can be added, never removed (their unread records would be lost)"
            )
        new_counts[target] = args.partitions
    if not isinstance(args.earliest, str) or not args.earliest.strip():
        raise ConfigError("--earliest must be a non-empty offset")
    new_partitions = [SystemStreamPartition(s.system, s.stream, p) for s, n in new_counts.items() for p in range(n)]
    known = old.partitions()
    earliest = {ssp: args.earliest.strip() for ssp in new_partitions if ssp not in known}
    from pipelines.systems.registry import position_order

    migrated: dict[SystemStreamPartition, str] = {}
    for stream in sorted(new_counts):
        key = position_order(stream.system)
        mine = CheckpointMap(old.factor, {s: o for s, o in old.offsets.items() if s.system_stream == stream})
        for position in mine.offsets.values():
            key(position)  # a position the system cannot read is refused here, with the system's message
        wholes = [s for s in new_partitions if s.system_stream == stream]
        migrated.update(migrate_checkpoints(mine, factor, wholes, earliest, key).offsets)
    new = CheckpointMap(factor, migrated)

    def human() -> str:
        rows = [
            [
                ssp.system,
                ssp.stream,
                ssp.partition,
                "-" if ssp.key_bucket is None else ssp.key_bucket,
                offset,
                "new partition" if ssp.whole() not in known else "",
            ]
            for ssp, offset in _sorted_offsets(new)
        ]
        head = f"factor {old.factor} -> {new.factor}, {len(known)} -> {len(new.partitions())} partitions"
        return head + "\n" + _table(["SYSTEM", "STREAM", "PARTITION", "BUCKET", "OFFSET", ""], rows)

    output.emit(new.to_json(), human)


def cmd_model_import(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.core.samza import model_from_samza

    where = "stdin" if args.samza == "-" else args.samza
    try:
        text = sys.stdin.read() if args.samza == "-" else Path(args.samza).read_text(encoding="utf-8")
        document = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"cannot read Samza job model {where}: {getattr(e, 'strerror', None) or e}") from None
    job = validate_name("job", args.job) if args.job else None
    model = model_from_samza(document, job=job, version=args.version)
    output.emit(model.to_json(), lambda: _model_text(model, None, saved=False))


def cmd_model_export(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.control import ControlPlane
    from pipelines.core.samza import model_to_samza

    models = ControlPlane(home).job_models
    model = models.get(args.job, args.version) if args.version is not None else models.active(args.job)
    document = model_to_samza(model)
    output.emit(document, lambda: json.dumps(document, indent=2))


def _read_checkpoint_map(source: str) -> CheckpointMap:
    where = "stdin" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read checkpoint file {where}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ModelError(f"checkpoint file {where} is not UTF-8 text; expected a JSON checkpoint map") from None
    try:
        return CheckpointMap.loads(text)
    except ModelError as e:
        raise ModelError(f"checkpoint file {where}: {e}") from None


def _partition_counts(checkpoints: CheckpointMap) -> dict[SystemStream, int]:
    counts: dict[SystemStream, int] = {}
    for ssp in checkpoints.partitions():
        counts[ssp.system_stream] = max(counts.get(ssp.system_stream, 0), ssp.partition + 1)
    missing = sorted(
        str(SystemStreamPartition(s.system, s.stream, p))
        for s, n in counts.items()
        for p in range(n)
        if SystemStreamPartition(s.system, s.stream, p) not in checkpoints.partitions()
    )
    if missing:
        raise ModelError(f"checkpoint map lacks partitions {', '.join(missing)}; a model's map covers all of them")
    return counts


def _grown_stream(counts: Mapping[SystemStream, int], name: str | None) -> SystemStream:
    candidates = [s for s in counts if name is None or s.stream == name]
    if len(candidates) == 1:
        return candidates[0]
    streams = ", ".join(sorted(s.stream for s in counts))
    if not candidates:
        raise ConfigError(f"the checkpoint map has no stream {name!r}; its streams are {streams}")
    raise ConfigError(f"the checkpoint map has several streams ({streams}); say which one grew with --stream")


def _model_text(model: JobModel, previous: JobModel | None, *, saved: bool) -> str:
    status = "saved, not active" if saved else "not saved"
    base = f"previous v{previous.version} (factor {previous.elasticity_factor})" if previous else "no previous model"
    head = (
        f"job {model.job_name} version {model.version} ({status}; {base})\n"
        f"factor {model.elasticity_factor}  grouper {model.grouper}  "
        f"containers {len(model.containers)}  tasks {model.task_count}"
    )
    rows = [
        [cid, task.task_name.name, task.mode, "; ".join(str(s) for s in sorted(task.ssps, key=_ssp_order))]
        for cid in sorted(model.containers, key=_container_order)
        for task in sorted(model.containers[cid].tasks.values(), key=lambda t: _task_order(t.ssps, t.task_name.name))
    ]
    return head + "\n" + _table(["CONTAINER", "TASK", "MODE", "SSPS"], rows)


# ---------------------------------------------------------------------- job


def cmd_store_list(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.adjunct.inspect import describe_stores

    rows = describe_stores(home, validate_name("job", args.job))

    def human() -> str:
        if not rows:
            return f"job {args.job} has no stores"
        table = []
        for r in rows:
            boot = r.get("last_bootstrap") or {}
            table.append(
                [
                    r["store"],
                    r["input"],
                    r["partitioning"],
                    r["state"],
                    _dash(r.get("version")),
                    _dash(r.get("snapshot_entries")),
                    _dash(r.get("bytes")),
                    " ".join(f"{p}:{v}" for p, v in sorted((r.get("positions") or {}).items())) or "-",
                    _text(boot["finished_at"]) if boot.get("finished_at") else "-",
                ]
            )
        return _table(
            ["STORE", "INPUT", "KIND", "STATE", "VERSION", "ENTRIES", "BYTES", "POSITIONS", "BOOTSTRAP"], table
        )

    output.emit(rows, human)


def cmd_store_verify(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.adjunct.inspect import verify_store

    verdict = verify_store(home, validate_name("job", args.job), args.store, sample=args.sample)
    data = {
        "success": verdict.success,
        "checked": verdict.checked,
        "mismatches": verdict.mismatches,
        "examples": list(verdict.examples),
    }

    def human() -> str:
        head = f"store {args.store}: {verdict.checked} keys checked, {verdict.mismatches} served wrongly"
        return head + "".join(f"\n  {e}" for e in verdict.examples)

    output.emit(data, human)
    if not verdict.success:
        raise PipelinesError(f"store {args.store} of job {args.job} serves values its stream does not hold")


def cmd_job_list(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.control import ControlPlane

    cp = ControlPlane(home)
    rows = []
    for job in cp.job_models.jobs():
        history = cp.job_models.history(job)
        active = next((h for h in reversed(history) if h["active"]), None)
        rows.append(
            {
                "job": job,
                "active_version": active["version"] if active else None,
                "latest_version": max(h["version"] for h in history),
                "factor": active["factor"] if active else None,
                "grouper": active["grouper"] if active else None,
                "tasks": active["task_count"] if active else None,
                "activated_at": active["created_at"] if active else None,
            }
        )

    def human() -> str:
        if not rows:
            return f"no jobs in {home.control}"
        return _table(
            ["JOB", "ACTIVE", "LATEST", "FACTOR", "TASKS", "ACTIVATED"],
            [
                [
                    r["job"],
                    _dash(r["active_version"]),
                    r["latest_version"],
                    _dash(r["factor"]),
                    _dash(r["tasks"]),
                    _text(r["activated_at"]) if r["activated_at"] else "-",
                ]
                for r in rows
            ],
        )

    output.emit(rows, human)


def cmd_job_show(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.control import ControlPlane

    cp = ControlPlane(home)
    job = validate_name("job", args.job)
    history = cp.job_models.history(job)
    active_version = cp.job_models.active_version(job)
    model = cp.job_models.get(job, active_version) if active_version is not None else None
    data = {
        "job": job,
        "active_version": active_version,
        "latest_version": cp.job_models.latest_version(job),
        "active_model": model.to_json() if model else None,
        "history": history,
    }

    def human() -> str:
        if model is None:
            head = f"job {job}: no active model (latest planned version {data['latest_version']})"
        else:
            head = (
                f"job {job}: active version {model.version}, factor {model.elasticity_factor}, "
                f"grouper {model.grouper}, {len(model.containers)} containers, {model.task_count} tasks\n"
                f"inputs: {', '.join(f'{s} ({n} partitions)' for s, n in sorted(model.partitions().items()))}"
            )
        rows = [
            [
                _text(h["created_at"]),
                h["version"],
                h["event"] + (" *" if h["active"] else ""),
                h["factor"],
                h["task_count"],
                h["reason"],
            ]
            for h in history
        ]
        return (
            head
            + "\n\nhistory (* = in force):\n"
            + _table(["AT", "VERSION", "EVENT", "FACTOR", "TASKS", "REASON"], rows)
        )

    output.emit(data, human)


def cmd_job_checkpoints(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.control import ControlPlane

    cp = ControlPlane(home)
    job = validate_name("job", args.job)
    version = args.version
    if version is None:
        version = cp.job_models.active(job).version
    checkpoints = cp.checkpoints.latest(job, version)
    output.emit(
        checkpoints.to_json(),
        lambda: (
            f"job {job} version {version}, factor {checkpoints.factor}\n"
            + _table(
                ["SYSTEM", "STREAM", "PARTITION", "BUCKET", "OFFSET"],
                [
                    [s.system, s.stream, s.partition, "-" if s.key_bucket is None else s.key_bucket, off]
                    for s, off in _sorted_offsets(checkpoints)
                ],
            )
        ),
    )


# ---------------------------------------------------------------------- formatting


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def _plain(value: Any) -> Any:
    """JSON-ready copy: dataclasses to dicts, datetimes to ISO strings, dict keys to strings."""
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _text(value: Any) -> str:
    return value.isoformat(timespec="seconds") if isinstance(value, datetime) else str(value)


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _sorted_offsets(checkpoints: CheckpointMap) -> list[tuple[SystemStreamPartition, str]]:
    return sorted(checkpoints.offsets.items(), key=lambda kv: _ssp_order(kv[0]))


def _ssp_order(ssp: SystemStreamPartition) -> tuple[str, str, int, int]:
    return (ssp.system, ssp.stream, ssp.partition, -1 if ssp.key_bucket is None else ssp.key_bucket)


def _task_order(ssps: Iterable[SystemStreamPartition], name: str) -> tuple[Any, ...]:
    return (min((_ssp_order(s) for s in ssps), default=("", "", -1, -1)), name)


def _container_order(cid: str) -> tuple[int, str]:
    return (int(cid), cid) if cid.isdigit() else (1 << 30, cid)
