"""Observing a job: ``status`` (figures over time), ``verify`` (data quality) and ``sql`` over the home."""

from __future__ import annotations

import argparse

from pipelines.cli.output import Output
from pipelines.core.ssp import validate_name
from pipelines.errors import PipelinesError
from pipelines.storage.home import Home
from pipelines.texttable import table


def status(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.observe.status import status as show_status

    job = validate_name("job", args.job)
    show_status(home, job, output, minutes=args.minutes, watch=args.watch, export=args.export)


def verify(args: argparse.Namespace, home: Home, output: Output) -> None:
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


def sql(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.observe.sql import refuse_before_spark, refuse_without_home, register, run_query, sql_session
    from pipelines.runtime.logs import until_done

    refuse_before_spark(args.query)
    refuse_without_home(home)
    with until_done(), sql_session(args.master) as spark:  # a failed query is its one error line
        register(spark, home)
        columns, rows = run_query(spark, args.query)
    output.emit(
        [dict(zip(columns, row, strict=True)) for row in rows],
        lambda: (
            table(columns, [["NULL" if v is None else v for v in row] for row in rows])
            + f"\n({len(rows)} row{'s' if len(rows) != 1 else ''})"
        ),
    )


def metrics(args: argparse.Namespace, home: Home, output: Output) -> None:
    """Every job's signals in OpenMetrics: printed once (a textfile collector, a cron), or served for Prometheus."""
    from pipelines.observe.openmetrics import exposition, registry
    from pipelines.observe.signals import read_signals

    signals = read_signals(home)
    if not signals:  # a mistyped --home would otherwise look like a quiet platform
        output.note(f"note: no job has a model in {home.root} yet: no samples until one is created")
    if not args.serve:
        output.emit(signals, lambda: exposition(signals))
        return
    import threading

    from prometheus_client import start_http_server

    try:
        server, _ = start_http_server(args.port, addr=args.host, registry=registry(lambda: read_signals(home)))
    except OSError as e:
        raise PipelinesError(f"cannot serve metrics on {args.host}:{args.port}: {e.strerror or e}") from None
    port = server.server_address[1]
    output.note(f"serving OpenMetrics of every job in {home.root} on http://{args.host}:{port}/metrics (Ctrl-C stops)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
