#!/usr/bin/env bash
# The demo end to end on the embedded default (no server): installs into ./.venv, then runs
# one job through scale-up, partition expansion and scale-down, verifying every step.
# Extra arguments go to `pipelines demo` (e.g. --records 5000 --latency-ms 5).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pipelines demo "$@"
