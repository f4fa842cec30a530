#!/usr/bin/env bash
# The soak (not CI): the demo's live job for 30 minutes, a rescale every 2 minutes (random factor up or down),
# one expansion (embedded log) or a shard split and a merge (--input kinesis, kinesis-mock on loopback); every
# step verified, memory of the driver sampled. Extra arguments go to the soak, e.g.
#   scripts/soak.sh --minutes 10 --every 60
#   scripts/soak.sh --input kinesis
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
exec .venv/bin/python -m pipelines.demo.soak "$@"
