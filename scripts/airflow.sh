#!/usr/bin/env bash
# A local Airflow for this repository's DAGs and plugin (SQLite, LocalExecutor, loopback only), with
# AIRFLOW_HOME=./.airflow and the jobs' state in $PIPELINES_HOME (default ./.pipelines-home).
# The UI is http://127.0.0.1:8080 (AIRFLOW_PORT); the admin password is printed at start and kept in
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.
#
# Not `airflow standalone`: it starts the scheduler's and triggerer's log servers, which bind every
# interface (:8793, :8794) and have no host setting. Here the api-server binds 127.0.0.1 and the log
# servers are not started (LocalExecutor on one machine: the api-server reads task logs from disk).
#
# Ctrl-C, SIGTERM or SIGHUP at any moment (setup, db migrate, the wait for the api-server, running) stops
# every process this script started within a few seconds, and the script exits 130, 143 or 129.
set -euo pipefail
if (( $# )); then  # everything is set through the environment (AIRFLOW_PORT, PIPELINES_HOME, AIRFLOW_HOME)
  echo "error: scripts/airflow.sh takes no arguments, got '$*' (set AIRFLOW_PORT or PIPELINES_HOME instead)" >&2
  exit 2
fi

# A script started in the background by a non-interactive shell (`scripts/test.sh > log &`, CI runners) gets
# SIGINT ignored, and bash cannot trap a signal that was ignored on entry: Ctrl-C would be dropped and every
# server left running. So the script starts itself once more with SIGINT and SIGTERM at their defaults.
# (SIGHUP is left alone: ignored, as under nohup, it is meant to be.)
if [[ -z "${_AIRFLOW_SH_SIGNALS_RESET:-}" ]]; then
  export _AIRFLOW_SH_SIGNALS_RESET=1
  exec env --default-signal=INT,TERM bash "${BASH_SOURCE[0]}" "$@"
fi
unset _AIRFLOW_SH_SIGNALS_RESET

# Everything this script starts runs in the background in its own process group (setsid), and the script waits
# for it with the `wait` builtin: bash runs a trap only once a foreground command has ended, but `wait` returns
# at once when a trapped signal arrives. Background children ignore SIGINT (bash's rule without job control) and
# the terminal's Ctrl-C reaches only this script's group, so the trap stops them all: SIGTERM to each group, a
# few seconds' grace, then SIGKILL. `jobs -p` lists every group, also one forked just before the signal.
components=()
STOP_GRACE_S=5   # then SIGKILL; the whole stop stays within 10 s of the signal on a loaded machine
alive() { local pid; for pid in "$@"; do kill -0 -- "-$pid" 2>/dev/null && return 0; done; return 1; }
wait_gone() {  # until no group in $2... is left, or $1 seconds have passed
  local deadline=$(( ${EPOCHREALTIME//[!0-9]/} + $1 * 1000000 )); shift
  while alive "$@" && (( ${EPOCHREALTIME//[!0-9]/} < deadline )); do sleep 0.1; done
}
stop() {
  trap '' INT TERM HUP   # a second Ctrl-C must not cut the (bounded) stop short
  trap - EXIT
  local groups
  mapfile -t groups < <(jobs -p)
  echo "[airflow] stopping ${groups[*]:-nothing}" >&2
  (( ${#groups[@]} )) || return 0
  # bash reports every background job a signal ended ("Killed", "Terminated": a line each, naming this script's
  # line 37) on its stderr when it reaps it; the stop is ours, so its stderr is closed until they are reaped
  exec 3>&2 2>/dev/null
  kill -TERM -- "${groups[@]/#/-}" || true
  wait_gone "$STOP_GRACE_S" "${groups[@]}"
  if alive "${groups[@]}"; then
    echo "[airflow] SIGKILL to what is left after ${STOP_GRACE_S}s" >&3
    kill -KILL -- "${groups[@]/#/-}" || true
    wait_gone 2 "${groups[@]}"
  fi
  alive "${groups[@]}" || wait || true  # reap them (none is left: the wait returns at once)
  exec 2>&3 3>&-
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap 'stop; exit 129' HUP
trap stop EXIT

step() {  # step LOG COMMAND...: run COMMAND in its own process group, output to LOG (- for ours), and wait for it
  local log=$1; shift   # (a redirection of the step itself would also take the trap's messages)
  if [[ $log == - ]]; then setsid "$@" & else setsid "$@" > "$log" 2>&1 & fi
  wait "$!"
}

cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ "${SKIP_SETUP:-0}" != 1 ]]; then
  echo "[airflow] setup: scripts/setup.sh" >&2
  step - scripts/setup.sh
fi
export AIRFLOW_HOME="${AIRFLOW_HOME:-$PWD/.airflow}"
export PIPELINES_HOME="${PIPELINES_HOME:-$PWD/.pipelines-home}"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
# The plugin and the provider (the `pipelines` connection type) come from the installed elastic-pipelines-airflow
# distribution (scripts/setup.sh), through its entry points: no plugins folder of ours.
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
# Airflow's default database here is SQLite: writers wait for each other up to a minute instead of 5 s, which a
# busy laptop's scheduler outlasts ("database is locked"; plugins/pipelines_airflow/sqlite.py).
if [[ "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite}" == sqlite* ]]; then
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS:-pipelines_airflow.sqlite.CONNECT_ARGS}"
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC:-pipelines_airflow.sqlite.CONNECT_ARGS_ASYNC}"
fi
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"   # 2 cores: keep tasks few
# The scheduled DAGs (repartition_watch, scale_evaluation, elastic_microbatch, quality_report) run as soon as
# they are registered: Airflow's default pauses new DAGs, and nothing told an operator to unpause them.
# stream_maintenance deletes data, so it stays paused until the operator unpauses it (is_paused_upon_creation).
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
PORT="${AIRFLOW_PORT:-8080}"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$PORT"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$PORT/execution/"
export AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST=127.0.0.1
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}"
# No SPARK_LOCAL_IP here: a driver a task starts binds loopback for a local master by itself
# (pipelines.runtime.session), and a value set here would pin it to loopback for a cluster master too, where
# executors on other hosts could never connect back to it.
export PATH="$PWD/.venv/bin:$PATH"
LOGS="$AIRFLOW_HOME/logs"
mkdir -p "$LOGS"
# One secret for every process, so tokens signed by one are accepted by the others (kept across restarts).
SECRETS="$AIRFLOW_HOME/pipelines-secrets.env"
if [[ ! -f "$SECRETS" ]]; then
  python - > "$SECRETS" <<'PY'
import secrets
print(f"AIRFLOW__API_AUTH__JWT_SECRET={secrets.token_urlsafe(64)}")
print(f"AIRFLOW__API__SECRET_KEY={secrets.token_urlsafe(64)}")
PY
  chmod 600 "$SECRETS"
fi
set -a; . "$SECRETS"; set +a

echo "[airflow] db migrate (log $LOGS/db-migrate.log)" >&2
step "$LOGS/db-migrate.log" airflow db migrate || {
  echo "[airflow] db migrate failed; see $LOGS/db-migrate.log" >&2
  exit 1
}
# SQLite in write-ahead-log mode: readers never hold a writer off (plugins/pipelines_airflow/sqlite.py)
if [[ "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite}" == sqlite* ]]; then
  step - python -m pipelines_airflow.sqlite
fi

start() {  # each component leads its own process group, so a stop reaches its children too
  local name=$1; shift
  setsid airflow "$@" > "$LOGS/$name.log" 2>&1 &
  components+=("$!")
  echo "[airflow] $name: pid $! (log $LOGS/$name.log)" >&2
}
# The scheduler and the triggerer start once the api-server answers: a task they start reports to its execution
# API, and the first scheduled runs, started before it listened, failed red ("Connection refused") on a fresh start.
# The DAG processor only parses DAGs: it starts at once, beside the api-server's start-up.
start api-server api-server --host 127.0.0.1 --port "$PORT" --workers 1
start dag-processor dag-processor

echo "[airflow] waiting for the api-server on 127.0.0.1:$PORT" >&2
# (Not a here-document: a background command's stdin is /dev/null.)
step - python -c '
import sys, time, urllib.request
deadline = time.monotonic() + 600  # a cold start on a loaded 2-core machine takes minutes
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v2/monitor/health", timeout=2)
        sys.exit(0)
    except OSError:
        time.sleep(0.5)
sys.exit(1)
' "$PORT" || { echo "[airflow] the api-server did not answer in 10 minutes; see $LOGS" >&2; exit 1; }
echo "[airflow] the api-server answers: starting the scheduler and the triggerer" >&2
start scheduler scheduler --skip-serve-logs
start triggerer triggerer --skip-serve-logs
PASSWORDS="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
echo "[airflow] ready: http://127.0.0.1:$PORT  (users and passwords: $(cat "$PASSWORDS" 2>/dev/null || echo "see $PASSWORDS"))" >&2
# Stay up while the components run; a signal interrupts `wait` and runs the trap.
while true; do
  wait -n "${components[@]}" 2>/dev/null || true
  for pid in "${components[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "[airflow] a component (pid $pid) exited; see $LOGS; stopping the rest" >&2
      exit 1
    fi
  done
done
