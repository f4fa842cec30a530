"""``pipelines job ...``: the jobs in the control plane, their models, checkpoints, and registering one."""

from __future__ import annotations

import argparse

from pipelines.cli.output import Output, dash, sorted_offsets, text
from pipelines.core.ssp import validate_name
from pipelines.errors import ConfigError
from pipelines.storage.home import Home
from pipelines.texttable import table


def list_jobs(args: argparse.Namespace, home: Home, output: Output) -> None:
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
        return table(
            ["JOB", "ACTIVE", "LATEST", "FACTOR", "TASKS", "ACTIVATED"],
            [
                [
                    r["job"],
                    dash(r["active_version"]),
                    r["latest_version"],
                    dash(r["factor"]),
                    dash(r["tasks"]),
                    text(r["activated_at"]) if r["activated_at"] else "-",
                ]
                for r in rows
            ],
        )

    output.emit(rows, human)


def show(args: argparse.Namespace, home: Home, output: Output) -> None:
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
                text(h["created_at"]),
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
            + table(["AT", "VERSION", "EVENT", "FACTOR", "TASKS", "REASON"], rows)
        )

    output.emit(data, human)


def checkpoints(args: argparse.Namespace, home: Home, output: Output) -> None:
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
            + table(
                ["SYSTEM", "STREAM", "PARTITION", "BUCKET", "OFFSET"],
                [
                    [s.system, s.stream, s.partition, "-" if s.key_bucket is None else s.key_bucket, off]
                    for s, off in sorted_offsets(checkpoints)
                ],
            )
        ),
    )


def create(args: argparse.Namespace, home: Home, output: Output) -> None:
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


def compact(args: argparse.Namespace, home: Home, output: Output) -> None:
    """Compaction by hand: a job that is not running, or a home written before drivers compacted.

    Superseded checkpoint and store-checkpoint rows, and metric rows past the job's ``metrics_retention_hours``,
    are deleted too.
    """
    import dataclasses

    from pipelines.control import ControlPlane
    from pipelines.control.compaction import MIN_FILES, compact_job
    from pipelines.jobs.config import job_config

    job = validate_name("job", args.job)
    models = ControlPlane(home).job_models
    if not models.planned_versions(job):
        raise models.unknown_job(job)
    done = compact_job(home, job, min_files=args.min_files or MIN_FILES)
    specs = job_config(models.active(job)).state if models.active_version(job) is not None else ()
    folded = []
    if specs:
        from pipelines.state.compaction import compact_job_states

        folded = compact_job_states(home, job, specs, models.active(job))

    def human() -> str:
        text = table(
            ["table", "files before", "files after", "old files deleted", "rows deleted"],
            [(c.table, c.files_before, c.files_after, c.deleted, c.rows_deleted) for c in done],
        )
        if folded:
            text += "\n" + table(
                ["state", "keys", "segment", "changes folded", "expired", "change files retired"],
                [(c.state, c.rows, c.segment, c.changes_folded, c.expired, c.files_retired) for c in folded],
            )
        return text

    output.emit(
        {
            "job": job,
            "tables": [dataclasses.asdict(c) for c in done],
            "states": [dataclasses.asdict(c) for c in folded],
        },
        human,
    )


def skip_lost(args: argparse.Namespace, home: Home, output: Output) -> None:
    """Records deleted before the job read them (Kafka's retention): list them, or move the job past them."""
    import dataclasses

    from pipelines.control import ControlPlane
    from pipelines.operations.lost import skip_lost as skip

    job = validate_name("job", args.job)
    models = ControlPlane(home).job_models
    if models.active_version(job) is None:
        raise models.unknown_job(job)
    gaps, version = skip(home, job, dry_run=args.dry_run)

    def human() -> str:
        if not gaps:
            return f"job {job}: nothing to skip: every partition still holds the records the job has not read"
        rows = [
            (g.stream, g.partition, g.checkpoint, g.earliest, "?" if g.records is None else g.records) for g in gaps
        ]
        head = table(["stream", "partition", "job at", "earliest now", "records gone"], rows)
        if version is None:
            return f"{head}\ndry run: nothing changed; without --dry-run the job goes on from each partition's earliest"
        return f"{head}\nv{version} active: the job goes on from each partition's earliest ('pipelines job show {job}')"

    output.emit(
        {"job": job, "gaps": [dataclasses.asdict(g) for g in gaps], "version": version, "dry_run": args.dry_run},
        human,
    )
