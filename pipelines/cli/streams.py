"""``pipelines stream ...``: create, fill, grow and describe input streams (the embedded log by default)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from pipelines.cli.output import Output, text
from pipelines.core.segments import retention_text
from pipelines.core.ssp import validate_name
from pipelines.core.start import start_time_ms, time_of_ms
from pipelines.errors import ConfigError
from pipelines.storage.home import Home
from pipelines.texttable import table


def open_system(args: argparse.Namespace, home: Home) -> Any:
    """The commands' input system, imported late: model and job commands must work without it."""
    from pipelines.systems.registry import open_system

    return open_system(validate_name("system", args.system), home, settings(args))


def settings(args: argparse.Namespace) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    if args.settings:
        try:
            parsed = json.loads(args.settings)
        except ValueError as e:
            raise ConfigError(
                f'--settings must be a JSON object, e.g. \'{{"bootstrap_servers": "host:9092"}}\': {e}'
            ) from None
        if not isinstance(parsed, dict):
            raise ConfigError(f"--settings must be a JSON object, got {type(parsed).__name__}")
    return parsed


def create(args: argparse.Namespace, home: Home, output: Output) -> None:
    name = validate_name("stream", args.name)
    if args.retention is None:
        _show_stream(open_system(args, home).create(name, args.partitions), output)
        return
    system = _with_retention(args, home, "--retention")
    _show_stream(_retention_shown(system, name, system.create(name, args.partitions, args.retention)), output)


def alter(args: argparse.Namespace, home: Home, output: Output) -> None:
    """Set a stream's own retention (the embedded log's metadata, a Kafka topic's ``retention.ms``, a Kinesis
    stream's retention period); it deletes nothing by itself: the next trim (the broker's clean-up, Kinesis's own
    expiry) applies it."""
    name = validate_name("stream", args.name)
    system = _with_retention(args, home, "alter")
    _show_stream(_retention_shown(system, name, system.set_retention(name, args.retention)), output)


def _with_retention(args: argparse.Namespace, home: Home, what: str) -> Any:
    """The system, when its streams keep a retention of their own that this CLI sets."""
    from pipelines.systems.base import SupportsRetention

    system_name = validate_name("system", args.system)
    system = open_system(args, home)
    if not isinstance(system, SupportsRetention):
        raise ConfigError(f"{what} is not for {system_name} streams: they keep no retention of their own here")
    return system


def _retention_shown(system: Any, name: str, meta: Any) -> Any:
    """``meta`` with the stream's own retention among its details, for systems whose ``describe`` leaves it out."""
    from dataclasses import replace

    if "retention_ms" in meta.details:
        return meta
    return replace(meta, details={**meta.details, "retention_ms": system.retention(name)})


def _embedded_only(system: str, what: str) -> None:
    """Trims are the embedded log's; Kafka and Kinesis delete by their own retention, named in the refusal."""
    from pipelines.cli.table import EMBEDDED_SYSTEM

    system = validate_name("system", system)
    if system != EMBEDDED_SYSTEM:
        raise ConfigError(
            f"{what} is for the embedded log's streams; {system} streams keep their retention in {_OWN[system]}"
            if system in _OWN
            else f"{what} is for the embedded log's streams, not {system}"
        )


def produce(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.demo.producer import PRODUCE_CHUNK, produce, produce_at_rate

    if (args.records is None) == (args.rate is None):
        raise ConfigError("stream produce needs --records N (at once) or --rate N with --seconds S (continuously)")
    if args.rate is not None and args.seconds is None:
        raise ConfigError("--rate needs --seconds: how long to produce")
    if args.rate is None and args.seconds is not None:
        raise ConfigError("--seconds goes with --rate: --records produces at once")
    if args.rate is not None and args.chunk is not None:
        raise ConfigError("--chunk goes with --records: --rate appends twice a second")
    name = validate_name("stream", args.name)
    if args.rate is not None:
        summary = produce_at_rate(
            open_system(args, home), home, name, args.rate, args.seconds, args.keys, args.seed, progress=output.note
        )
    else:
        summary = produce(
            open_system(args, home),
            home,
            name,
            args.records,
            args.keys,
            args.seed,
            chunk=PRODUCE_CHUNK if args.chunk is None else args.chunk,
            progress=output.note,
        )
    output.emit(
        summary,
        lambda: (
            f"produced {summary['records']} records over {summary['keys']} keys to {summary['stream']} "
            f"(seed {summary['seed']})\n"
            + table(
                ["PARTITION", "PRODUCED", "END"],
                [[p, summary["per_partition"].get(p, 0), end] for p, end in sorted(summary["end_offsets"].items())],
            )
        ),
    )


def expand(args: argparse.Namespace, home: Home, output: Output) -> None:
    system = open_system(args, home)
    _show_stream(system.expand(validate_name("stream", args.name), args.partitions), output)


def describe(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.systems.base import SupportsRelayout, SupportsRetention, SupportsStartAtTime

    system = open_system(args, home)
    name = validate_name("stream", args.name)
    if args.at is not None and (isinstance(system, SupportsRelayout) or not isinstance(system, SupportsStartAtTime)):
        raise ConfigError(f"--at is not available for {args.system} streams: their positions are not found by time")
    meta = system.describe(name)
    if isinstance(system, SupportsRetention):
        meta = _retention_shown(system, name, meta)
    if args.at is None or not isinstance(system, SupportsStartAtTime):
        _show_stream(meta, output)
        return
    at_ms = start_time_ms(args.at)
    assert at_ms is not None  # the argument's type takes times only
    found = system.positions_at(name, at_ms)
    _show_stream(meta, output, (args.at, {p: found.get(p, part.end) for p, part in meta.partitions.items()}))


def trim(args: argparse.Namespace, home: Home, output: Output) -> None:
    """The embedded log's retention: what was (or would be) deleted per partition, and what held it back."""
    import time
    from dataclasses import asdict

    from pipelines.core.segments import cutoff_ms

    name = validate_name("stream", args.name)
    _embedded_only(args.system, "trim")
    now_ms = int(time.time() * 1000)
    if args.before is not None:
        before_ms = start_time_ms(args.before)
        assert before_ms is not None  # the argument's type takes times only
        if before_ms > now_ms:
            raise ConfigError(f"--before {args.before} is in the future: every record is older than it")
    elif args.older_than is not None:
        before_ms = cutoff_ms(now_ms, args.older_than)
    else:
        before_ms = _own_cutoff(home, name, now_ms)
    from pipelines.operations.retention import kept_from, trim_stream

    done, readers = trim_stream(home, name, before_ms, lose_unread=args.lose_unread, dry_run=args.dry_run)

    def human() -> str:
        head = f"stream {name}: files older than {time_of_ms(before_ms)}: {done.records} records in {done.files} files"
        if args.dry_run:
            head += " would be deleted (dry run: nothing changed)"
        elif done.version is None:
            head += " deleted (nothing to delete)"
        else:
            head += f" deleted (table version {done.version})"
        rows = [
            [p.partition, p.earliest_before, p.earliest, p.records, p.files, kept_from(done, readers, p.partition)]
            for p in done.partitions
        ]
        return head + "\n" + table(["PARTITION", "EARLIEST WAS", "EARLIEST", "RECORDS", "FILES", "KEPT FROM"], rows)

    output.emit(
        {
            "stream": name,
            "before": time_of_ms(before_ms),
            "dry_run": args.dry_run,
            "version": done.version,
            "records": done.records,
            "files": done.files,
            "partitions": [{**asdict(p), "kept_from": kept_from(done, readers, p.partition)} for p in done.partitions],
            "readers": [asdict(r) for r in readers],
        },
        human,
    )


def _own_cutoff(home: Home, name: str, now_ms: int) -> int:
    """``stream trim NAME`` alone: the stream's own retention says what goes, or the refusal says how to say it."""
    from pipelines.core.segments import RETAIN_FOREVER, cutoff_ms
    from pipelines.systems.deltalog import DeltaLog

    log = DeltaLog(home.streams)
    try:
        own = log.retention(name)
    finally:
        log.close()
    if own is None:
        raise ConfigError(
            f"stream {name!r} has no retention of its own: say which records to delete with --before TIME or "
            f"--older-than AGE (e.g. 7d), or give it one with 'pipelines stream alter {name} --retention 7d'"
        )
    if own == RETAIN_FOREVER:
        raise ConfigError(
            f"stream {name!r} keeps its records forever (its retention): --before TIME or --older-than AGE "
            "trims it all the same"
        )
    return cutoff_ms(now_ms, own / 1000)


def compact(args: argparse.Namespace, home: Home, output: Output) -> None:
    """Small files of the embedded log merged into fewer: per partition, the files before and after."""
    from dataclasses import asdict

    from pipelines.systems.deltalog import DeltaLog

    name = validate_name("stream", args.name)
    log = DeltaLog(home.streams)
    try:
        done = log.compact(name, args.target_mb * 1024 * 1024, int(args.max_span * 1000), dry_run=args.dry_run)
    finally:
        log.close()

    def human() -> str:
        verb = "would merge" if args.dry_run else "merged"
        head = f"stream {name}: {verb} {sum(r.files for r in done.runs)} files into {len(done.runs)}"
        if args.dry_run:
            head += " (dry run: nothing changed)"
        rows = [
            [p, done.files_before[p], done.files_after[p], sum(1 for r in done.runs if r.partition == p)]
            for p in sorted(done.files_before)
        ]
        return head + "\n" + table(["PARTITION", "FILES BEFORE", "FILES AFTER", "RUNS MERGED"], rows)

    output.emit(
        {
            "stream": name,
            "dry_run": args.dry_run,
            "runs": [{k: v for k, v in asdict(r).items() if k != "paths"} for r in done.runs],
            "files_before": done.files_before,
            "files_after": done.files_after,
        },
        human,
    )


_OWN = {
    "kafka": "the topic's retention.ms ('pipelines stream alter NAME --retention AGE --system kafka', or "
    "kafka-configs.sh; kafka-delete-records.sh deletes at once); a job stopped by it goes on after 'job skip-lost'",
    "kinesis": "the stream's retention period ('pipelines stream alter NAME --retention 48h --system kinesis', or "
    "aws kinesis increase- and decrease-stream-retention-period)",
}


_DEFAULTS = {"deltalog": "stream_maintenance's older_than", "kafka": "the broker's log.retention.*"}
"""Whose retention applies to a stream without its own."""


def _show_stream(meta: Any, output: Output, at: tuple[str, dict[int, str]] | None = None) -> None:
    def human() -> str:
        lines = [f"stream {meta.system}.{meta.stream}: {len(meta.partitions)} partitions"]
        if "retention_ms" in meta.details:  # the stream's own (stream alter --retention), where the system keeps one
            own = meta.details["retention_ms"]
            lines[0] += f", retention {retention_text(own)}" + (f" ({_DEFAULTS[meta.system]})" if own is None else "")
        sized = all("files" in p.details for p in meta.partitions.values())  # the embedded log's, for its upkeep
        headers = [
            "PARTITION",
            "EARLIEST",
            "END",
            *(["FILES", "MIB"] if sized else []),
            *([f"AT {at[0]}"] if at else []),
        ]
        rows = [
            [
                p.partition,
                p.earliest,
                p.end,
                *([p.details["files"], f"{p.details['bytes'] / 2**20:.1f}"] if sized else []),
                *([at[1][n]] if at else []),
            ]
            for n, p in sorted(meta.partitions.items())
        ]
        lines.append(table(headers, rows))
        for e in meta.expansions:
            ends = ", ".join(f"{p}:{o}" for p, o in sorted(e.end_offsets.items()))
            lines.append(f"expanded {e.from_partitions} -> {e.to_partitions} at {text(e.at)} (old ends {ends})")
        return "\n".join(lines)

    output.emit({**asdict(meta), "at": {"time": at[0], "positions": at[1]}} if at else meta, human)
