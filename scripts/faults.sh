#!/usr/bin/env bash
# The fault matrix, repeated: kill -9 at every named point N times (random kill moments), recover as a user
# would, and print a table of lost / duplicated / out-of-order records and recovery times.
#   scripts/faults.sh                      # every point, 10 runs each (about an hour on 2 cores)
#   scripts/faults.sh --runs 3 --points mid_batch,after_migrate
# CI runs each point once instead: pytest -m faults (tests/faults/test_fault_matrix.py).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
exec .venv/bin/python -m tests.faults.matrix "$@"
