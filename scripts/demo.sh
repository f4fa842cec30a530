#!/usr/bin/env bash
# The demo end to end on the embedded default (no server): installs into ./.venv, then runs
# one job through scale-up, partition expansion and scale-down, verifying every step.
# Extra arguments go to `pipelines demo` (e.g. --rate 600 --latency-ms 5; --input kafka: the same story on a
# real Apache Kafka broker the demo starts and stops, its expansion done with CreatePartitions on the live topic).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pipelines demo "$@"
