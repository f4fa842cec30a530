"""Operating a job: ``run`` and ``stop`` it, ``rescale`` it, ``watch`` its inputs, ``autosize`` it, and the ``demo``."""

from __future__ import annotations

import argparse
from dataclasses import replace

from pipelines.cli.output import Output, text
from pipelines.core.ssp import validate_name
from pipelines.errors import ConfigError, PartitionChangeError, PipelinesError
from pipelines.storage.home import Home


def run(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.runtime import launcher

    if args.detach:  # returns once the driver registered; a driver that exited first is a PipelinesError
        started = launcher.start(home, args.job, available_now=args.available_now, master=args.master)
        pid, log = started.pid, started.log
        said = {
            launcher.Started.RUNNING: f"job {args.job} running as pid {pid}",
            launcher.Started.STARTING: (
                f"job {args.job} starting as pid {pid}: not running yet after {launcher.START_WAIT_S:.0f} s "
                f"(its log: {log}; python -m pipelines stop {args.job} ends it)"
            ),
            launcher.Started.ENDED: f"job {args.job} ran to its end as pid {pid} (its log: {log})",
        }[started.state]
        output.emit({"job": args.job, "pid": pid, "state": str(started.state)}, lambda: said)
        return
    result = launcher.run(home, args.job, available_now=args.available_now, master=args.master, detach=False)
    if result != 0:
        raise launcher.failure(home, args.job) or PipelinesError(f"job {args.job} driver exited with code {result}")


def demo(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.demo.run import DemoPace
    from pipelines.demo.run import main as embedded_demo

    pace = DemoPace(args.rate, args.seconds, args.keys, args.latency_ms, args.master)
    if args.home is None:  # the demo wipes its home: never the default one by accident
        home = Home(home.root / "demo")
    if args.input == "kinesis":
        from pipelines.demo.kinesis import main as kinesis_demo

        passed = kinesis_demo(home, pace) == 0
    else:
        passed = embedded_demo(home, pace, args.input) == 0
    if not passed:
        raise PipelinesError("the demo's verification failed; see the table above")


def _resolve_factor(home: Home, job: str, factor: str | None, reason: str, output: Output) -> tuple[object, str]:
    if factor is None or factor.strip().lower() != "auto":
        return factor, reason
    from pipelines.control.locks import ScalingInProgressError
    from pipelines.core.autosize import SKIP
    from pipelines.operations.autosize import evaluate

    decision = evaluate(home, validate_name("job", job))
    if decision.action == SKIP:
        raise ScalingInProgressError(f"the autosizer {'; '.join(decision.reasons)}; try again when it is done")
    output.note(f"autosizer: {decision.action} to factor {decision.factor}: " + "; ".join(decision.reasons))
    return decision.factor, decision.reason_for(reason)


def rescale(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.operations import scaling

    if args.sequence is not None:  # refused now, not at the verification that ends the rescale
        from pipelines.quality.verify import check_output_sequence

        check_output_sequence(home, validate_name("job", args.job), args.sequence)
    if args.factor is None and args.config is None:
        raise ConfigError("rescale needs --factor (a number, or auto) or --config (a new version of the job's YAML)")
    config = None
    if args.config is not None:
        from pipelines.jobs.config import JobConfig

        config = JobConfig.load(args.config).to_dict()
    factor, reason = _resolve_factor(home, args.job, args.factor, args.reason, output)
    request = scaling.ScalingRequest(
        validate_name("job", args.job),
        factor,  # type: ignore[arg-type]
        reason,
        grouper=args.grouper,
        config=config,
    )
    summary = scaling.plan(home, request)
    auto = args.factor is not None and args.factor.strip().lower() == "auto"
    request = replace(request, decided_on=summary["from_version"], autosized=auto)  # re-planned if it waits
    if not args.dry_run and not summary["changes"]:
        scaling.settle_abandoned(home, request.job, say=output.note)
    if args.dry_run or not summary["changes"]:
        output.emit(
            {"applied": False, "plan": summary},
            lambda: (
                "\n".join(f"{k:>14}: {text(v)}" for k, v in summary.items())
                + (
                    "\n(dry run: nothing changed)"
                    if args.dry_run
                    else "\n(the job already runs this model: nothing to do)"
                )
            ),
        )
        return
    try:
        result = scaling.run_all(
            home, request, sequence=args.sequence, master=args.master, lock_wait_s=args.lock_wait, say=output.note
        )
    except scaling.ScalingSkipped as e:  # another operation went first while this one waited for the lock
        why = str(e)
        output.emit({"applied": False, "skipped": why}, lambda: f"skipped: {why}")
        return
    output.emit(
        {"applied": True, **result},
        lambda: (
            f"job {args.job}: {result['status']}, "
            + ", ".join(f"{k} {result.get(k)}" for k in ("downtime_s", "records_replayed", "caught_up_s", "dq"))
        ),
    )
    if result["status"] != "verified":
        raise PipelinesError(f"rescale of {args.job} ended {result['status']}; see the steps above")


def watch(args: argparse.Namespace, home: Home, output: Output) -> None:
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


def autosize(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.operations.autosize import evaluate

    decision = evaluate(home, validate_name("job", args.job), record=not args.no_record)
    output.emit(
        {"job": args.job, **decision.to_dict()},
        lambda: f"{args.job}: {decision.action} -> factor {decision.factor}\n  " + "\n  ".join(decision.reasons),
    )


def stop(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.runtime import launcher

    outcome = launcher.stop(home, args.job, wait=not args.no_wait)
    words = {
        launcher.StopOutcome.NONE_RUNNING: "no driver was running; nothing to stop",
        launcher.StopOutcome.STOPPED: "stopped",
        launcher.StopOutcome.REQUESTED: "stop requested; its driver still runs",
    }
    output.emit(
        {"job": args.job, "stopped": outcome is not launcher.StopOutcome.REQUESTED, "outcome": str(outcome)},
        lambda: f"job {args.job}: {words[outcome]}",
    )
