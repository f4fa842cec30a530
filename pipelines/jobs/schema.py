"""The JSON schema of a job's YAML, generated from ``JobSpec``: ``python -m pipelines.jobs.schema [--write]``.

Published as ``docs/job-schema.json`` for editors and CI checks of job files
(``# yaml-language-server: $schema=...``); a test keeps the committed file
equal to what this prints, and checks every file in ``include/jobs/`` against
it. The model stays the truth: a few checks (an extractor that imports, a
name that fits after ``_dead_letters`` is added) are only the model's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pipelines.jobs.spec import JobSpec
from pipelines.usage import Parser

DOCS = Path(__file__).resolve().parents[2] / "docs" / "job-schema.json"


def job_schema() -> dict[str, Any]:
    schema = JobSpec.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": "Elastic pipelines job"}


def render() -> str:
    return json.dumps(job_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m pipelines.jobs.schema", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write it to {DOCS.relative_to(DOCS.parents[1])}")
    args = parser.parse_args(argv)
    if args.write:
        DOCS.write_text(render(), encoding="utf-8")
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
