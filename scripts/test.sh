#!/usr/bin/env bash
# The whole test suite on a fresh machine: install, lint, type-check, then every test (unit, integration, e2e).
# Extra arguments go to pytest, e.g. scripts/test.sh -m unit
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy --config-file pyproject.toml
exec .venv/bin/python -m pytest "$@"
