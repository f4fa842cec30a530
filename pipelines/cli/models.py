"""``pipelines model ...``: plan job models, migrate checkpoint maps, and Samza's job model format."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from pipelines.cli.output import Output, container_order, sorted_offsets, ssp_order, task_order
from pipelines.cli.streams import open_system, settings
from pipelines.core.checkpoints import CheckpointMap, migrate_checkpoints
from pipelines.core.groupers import check_growth, plan_job_model
from pipelines.core.hashing import validate_factor
from pipelines.core.limits import check_partition_count, check_task_count
from pipelines.core.model import JobModel
from pipelines.core.ssp import SystemStream, SystemStreamPartition, validate_name, validate_system
from pipelines.errors import ConfigError, ModelError, PartitionChangeError, PipelinesError, StreamError
from pipelines.storage.home import Home
from pipelines.texttable import table


def plan(args: argparse.Namespace, home: Home, output: Output) -> None:
    factor = validate_factor(args.factor)  # bad input is reported before the Delta libraries load
    job = validate_name("job", args.job)
    # a system no module serves is refused with or without --save (only --save opens it): a plan for it is no plan
    stream = SystemStream(validate_system(args.system), validate_name("stream", args.stream))
    from pipelines.control import ControlPlane

    partitions = args.partitions
    if partitions is None or args.save:
        try:
            actual = open_system(args, home).describe(stream.stream).partition_count
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
        with JobSystems(home, {stream.system: settings(args)}) as systems:
            start = planning.start_positions(systems, old, model)
        planning.save(home, planning.VersionPlan(previous, model, start), args.reason)
        output.note(f"saved {job} version {version} (planned, not active) with its start checkpoints")
    output.emit(model.to_json(), lambda: _model_text(model, previous, saved=args.save))


def migrate(args: argparse.Namespace, home: Home, output: Output) -> None:
    old = _read_checkpoint_map(args.source)
    factor = validate_factor(args.to_factor)
    counts = _partition_counts(old)
    new_counts = dict(counts)
    if args.partitions is not None:
        check_partition_count(args.partitions, "--partitions")
        target = _grown_stream(counts, args.stream)
        check_growth(f"--partitions: {target} in the checkpoint map", counts[target], args.partitions)
        new_counts[target] = args.partitions
    if not isinstance(args.earliest, str) or not args.earliest.strip():
        raise ConfigError("--earliest must be a non-empty offset")
    check_task_count(sum(new_counts.values()), factor, "the migrated checkpoint map")  # before listing partitions
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
        if any(s in earliest for s in wholes):  # --earliest is a position of this system too
            try:
                key(args.earliest.strip())
            except PipelinesError as e:
                raise ConfigError(f"--earliest: {e}") from None
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
            for ssp, offset in sorted_offsets(new)
        ]
        head = f"factor {old.factor} -> {new.factor}, {len(known)} -> {len(new.partitions())} partitions"
        return head + "\n" + table(["SYSTEM", "STREAM", "PARTITION", "BUCKET", "OFFSET", ""], rows)

    output.emit(new.to_json(), human)


def import_samza(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.core.samza import model_from_samza

    where = "stdin" if args.samza == "-" else args.samza
    try:
        text = sys.stdin.read() if args.samza == "-" else Path(args.samza).read_text(encoding="utf-8")
        document = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ConfigError(f"cannot read Samza job model {where}: {getattr(e, 'strerror', None) or e}") from None
    except RecursionError:  # 100,000 '[': no job model nests deeper than a few levels
        raise ConfigError(f"cannot read Samza job model {where}: its JSON nests too deeply to be a job model") from None
    job = validate_name("job", args.job) if args.job is not None else None  # --job "" is refused, not ignored
    model = model_from_samza(document, job=job, version=args.version)
    output.emit(model.to_json(), lambda: _model_text(model, None, saved=False))


def export_samza(args: argparse.Namespace, home: Home, output: Output) -> None:
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
        [cid, task.task_name.name, task.mode, "; ".join(str(s) for s in sorted(task.ssps, key=ssp_order))]
        for cid in sorted(model.containers, key=container_order)
        for task in sorted(model.containers[cid].tasks.values(), key=lambda t: task_order(t.ssps, t.task_name.name))
    ]
    return head + "\n" + table(["CONTAINER", "TASK", "MODE", "SSPS"], rows)
