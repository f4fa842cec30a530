#!/usr/bin/env bash
# Install everything the platform, its demo and its tests need, into ./.venv.
# Idempotent: a second run only checks. Needs Python 3.11; installs Java with apt if missing.
# --no-archive: everything but the drivers' class-data archive, which a second run without it builds (scripts/test.sh
# type-checks beside that build).
set -euo pipefail
cd "$(dirname "$0")/.."
archive=1
case "${1:-}" in
  --no-archive) archive=0 ;;
  "") ;;
  *) echo "error: unknown option '$1' (scripts/setup.sh takes only --no-archive)" >&2; exit 2 ;;
esac

log() { printf '[setup] %s\n' "$*" >&2; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then log "need root to apt-get install $*; install them yourself"; return 1; fi
  if [ -z "${_APT_UPDATED:-}" ]; then apt-get update -qq >/dev/null; _APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if ! command -v java >/dev/null 2>&1; then
  log "Java not found: installing openjdk-17-jre-headless (Spark runs on the JVM)"
  apt_install openjdk-17-jre-headless
fi

if [ ! -x /usr/bin/chromium ]; then
  log "Chromium not found: installing Debian's chromium (the e2e browser tests drive it headless with playwright)"
  apt_install chromium fonts-liberation
fi

# The pinned packages (requirements.txt, constraints.txt) and our two editable ones: the platform, and the Airflow
# provider and plugin (plugins/pyproject.toml), which Airflow finds through its entry points.
install_with_uv() {
  .venv/bin/python -m pip install -q -c constraints.txt uv || return 1
  local -a env=(UV_SYSTEM_CERTS=1)  # the system's certificates, as pip uses (a proxy's CA among them)
  local value
  value=$(pip_setting cert) && env+=(SSL_CERT_FILE="$value")
  value=$(pip_setting index-url) && env+=(UV_INDEX_URL="$value")
  value=$(pip_setting extra-index-url) && env+=(UV_EXTRA_INDEX_URL="$value")
  value=$(pip_setting find-links) && [ -d "$value" ] && env+=(UV_FIND_LINKS="$value")
  value=$(pip_setting default-timeout) && env+=(UV_HTTP_TIMEOUT="$value")
  local -a uv=(env "${env[@]}" .venv/bin/python -m uv pip install -q --python .venv/bin/python --compile-bytecode)
  "${uv[@]}" -r requirements.txt -c constraints.txt && "${uv[@]}" --no-deps -e . -e plugins
}

# One of pip's settings (cert, index-url, ...): its PIP_* variable, else pip's configuration files; fails if unset.
pip_setting() {
  local name="PIP_$(printf '%s' "$1" | tr 'a-z-' 'A-Z_')" value
  value="${!name:-}"
  [ -n "$value" ] || value=$(.venv/bin/python -m pip config list 2>/dev/null | sed -n "s/^\(global\|install\)\.$1='\(.*\)'\$/\2/p" | head -n 1)
  [ -n "$value" ] && printf '%s\n' "$value"
}

install_with_pip() {
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt -c constraints.txt
  .venv/bin/python -m pip install -q --no-deps -e . -e plugins
}

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi

stamp=.venv/.requirements.sha
want=$(cat requirements.txt constraints.txt pyproject.toml plugins/pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing Python packages (first run takes a minute or two)"
  # uv installs what pip would (the same requirements, constraints and versions, compiled as pip compiles them), with
  # parallel downloads: 58 s here against pip's 93 s, both from full caches (54 s from an empty one). It reads none of
  # pip's configuration, so pip's settings are handed over (pip_setting); pip stays the fallback.
  if ! install_with_uv; then
    log "uv could not install the packages (above): installing them with pip"
    install_with_pip
  fi
  echo "$want" > "$stamp"
fi
# Our own package is installed editable, so pip compiled none of it. Where PYTHONDONTWRITEBYTECODE is set (CI
# machines and many container images set it), every Python process would compile it from source again: each Spark
# worker, each query's source runner, each Airflow task (0.09 CPU-s for a worker's imports here). Compiled once
# here; Python checks each file's mtime, so an edited module is compiled in memory again, never served stale.
.venv/bin/python -m compileall -q -j 0 pipelines plugins dags include || log "some modules did not compile (above)"
# kinesis-mock, the Kinesis emulator the Kinesis tests and `demo.sh --input kinesis` start (Node 18+, npm).
emulator=tools/kinesis-mock
emulator_want=$(sha256sum "$emulator/package-lock.json" | cut -d' ' -f1)
if [ "$(cat "$emulator/node_modules/.lock.sha" 2>/dev/null)" != "$emulator_want" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    log "npm not found: installing Debian's nodejs and npm (the Kinesis emulator runs on Node)"
    apt_install nodejs npm
  fi
  log "installing kinesis-mock (npm ci in $emulator)"
  (cd "$emulator" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  echo "$emulator_want" > "$emulator/node_modules/.lock.sha"
fi
# JVM libraries pinned in a pom.xml under jvm/, copied by the machine's Maven into a folder of .jvm/ (git-ignored).
# Fetched again only when the pom changes: a second set-up reads the stamp and needs no network. Made beside the
# folder and renamed, so a failed fetch leaves the previous set (or none) and never half of one.
fetch_jvm_jars() {
  local pom=$1 dest=$2 want
  want=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ "$(cat "$dest/.pom.sha" 2>/dev/null)" = "$want" ]; then return 0; fi
  if ! command -v mvn >/dev/null 2>&1; then
    log "Maven not found: installing Debian's maven (it fetches the JVM libraries jvm/*/pom.xml pin)"
    apt_install maven
  fi
  log "fetching the JVM libraries of $pom into $dest"
  mkdir -p "$(dirname "$dest")"
  rm -rf "$dest.new"
  if ! mvn -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$PWD/$dest.new" >"$dest.log" 2>&1; then
    tail -n 40 "$dest.log" >&2
    log "Maven could not fetch the JVM libraries of $pom (above; whole log in $dest.log)"
    exit 1
  fi
  echo "$want" > "$dest.new/.pom.sha"
  rm -rf "$dest"
  mv "$dest.new" "$dest"
}
# Spark's JVM libraries (Delta Lake, s3a, Spark's Kafka source), without what pyspark's own jars/ already ships.
fetch_jvm_jars jvm/spark/pom.xml .jvm/spark-jars
# An Apache Kafka broker and its tools, for the tests, the demo and the benchmarks (testbed/servers/kafka_broker.py).
fetch_jvm_jars jvm/kafka/pom.xml .jvm/kafka
# A class-data archive of a Spark driver's classes (pipelines/runtime/jvm_archive.py): every driver maps it instead
# of loading and verifying ~15,000 classes (a spark-submit's CPU roughly halves). Made once per JVM and jar set,
# by running a small job (about a minute); without it drivers just start slower.
if [ "$archive" = 1 ] && ! .venv/bin/python -c 'import sys; from pipelines.runtime.jvm_archive import java_options; sys.exit(not java_options())'; then
  log "building the class-data archive of Spark drivers (.jvm/spark-driver.jsa; once per JVM and jar set)"
  .venv/bin/python -m pipelines.runtime.jvm_archive || log "no class-data archive: drivers start without one"
fi
ready="ready: $(.venv/bin/python --version), pyspark $(.venv/bin/python -c 'import pyspark; print(pyspark.__version__)')"
if [ "$archive" = 1 ]; then log "$ready"; else log "$ready (the class-data archive comes with the next set-up)"; fi
