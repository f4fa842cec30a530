"""``pipelines store ...``: a job's adjunct data stores, and whether they serve what their streams hold."""

from __future__ import annotations

import argparse

from pipelines.cli.output import Output, dash, text
from pipelines.core.ssp import validate_name
from pipelines.errors import PipelinesError
from pipelines.storage.home import Home
from pipelines.texttable import table


def list_stores(args: argparse.Namespace, home: Home, output: Output) -> None:
    from pipelines.adjunct.inspect import describe_stores

    rows = describe_stores(home, validate_name("job", args.job))

    def human() -> str:
        if not rows:
            return f"job {args.job} has no stores"
        cells = []
        for r in rows:
            boot = r.get("last_bootstrap") or {}
            cells.append(
                [
                    r["store"],
                    r["input"],
                    r["partitioning"],
                    r["state"],
                    dash(r.get("version")),
                    dash(r.get("snapshot_entries")),
                    dash(r.get("bytes")),
                    " ".join(f"{p}:{v}" for p, v in sorted((r.get("positions") or {}).items())) or "-",
                    text(boot["finished_at"]) if boot.get("finished_at") else "-",
                ]
            )
        return table(
            ["STORE", "INPUT", "KIND", "STATE", "VERSION", "ENTRIES", "BYTES", "POSITIONS", "BOOTSTRAP"], cells
        )

    output.emit(rows, human)


def verify(args: argparse.Namespace, home: Home, output: Output) -> None:
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
