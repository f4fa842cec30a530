#!/usr/bin/env bash
# A local Airflow for this repository's DAGs and plugin (SQLite, LocalExecutor, loopback only), with
# AIRFLOW_HOME=./.airflow and the jobs' state in $PIPELINES_HOME (default ./.pipelines-home).
# The UI is http://127.0.0.1:8080 (AIRFLOW_PORT); the admin password is printed at start and kept in
# $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated.
#
# Not `airflow standalone`: it starts the scheduler's and triggerer's log servers, which bind every
# interface (:8793, :8794) and have no host setting. Here the api-server binds 127.0.0.1 and the log
# servers are not started (LocalExecutor on one machine: the api-server reads task logs from disk).
# Ctrl-C or SIGTERM stops every process this script started.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ "${SKIP_SETUP:-0}" == 1 ]] || scripts/setup.sh
export AIRFLOW_HOME="${AIRFLOW_HOME:-$PWD/.airflow}"
export PIPELINES_HOME="${PIPELINES_HOME:-$PWD/.pipelines-home}"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$PWD/plugins"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-4}"   # 2 cores: keep tasks few
# The scheduled DAGs (repartition_watch, scale_evaluation, elastic_microbatch, quality_report) run as soon as
# they are registered: Airflow's default pauses new DAGs, and nothing told an operator to unpause them.
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
PORT="${AIRFLOW_PORT:-8080}"
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$PORT"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$PORT/execution/"
export AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST=127.0.0.1
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
export AIRFLOW_CONN_SPARK_DEFAULT="${AIRFLOW_CONN_SPARK_DEFAULT:-{\"conn_type\": \"spark\", \"host\": \"local[*]\"}}"
export SPARK_LOCAL_IP=127.0.0.1
export PATH="$PWD/.venv/bin:$PATH"
mkdir -p "$AIRFLOW_HOME/logs"
# One secret for every process, so tokens signed by one are accepted by the others (kept across restarts).
SECRETS="$AIRFLOW_HOME/pipelines-secrets.env"
if [[ ! -f "$SECRETS" ]]; then
  python - > "$SECRETS" <<'EOF'
import secrets
print(f"AIRFLOW__API_AUTH__JWT_SECRET={secrets.token_urlsafe(64)}")
print(f"AIRFLOW__API__SECRET_KEY={secrets.token_urlsafe(64)}")
EOF
  chmod 600 "$SECRETS"
fi
set -a; . "$SECRETS"; set +a

airflow db migrate > "$AIRFLOW_HOME/logs/db-migrate.log" 2>&1

pids=()
stop() {
  trap - INT TERM EXIT
  echo "[airflow] stopping ${pids[*]:-nothing}" >&2
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.2
  done
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

start() {  # each component leads its own process group, so a stop reaches its children too
  local name=$1; shift
  setsid airflow "$@" > "$AIRFLOW_HOME/logs/$name.log" 2>&1 &
  pids+=("$!")
  echo "[airflow] $name: pid $! (log $AIRFLOW_HOME/logs/$name.log)" >&2
}
start api-server api-server --host 127.0.0.1 --port "$PORT" --workers 1
start scheduler scheduler --skip-serve-logs
start dag-processor dag-processor
start triggerer triggerer --skip-serve-logs

python - "$PORT" <<'EOF'
import sys, time, urllib.request
for _ in range(240):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/api/v2/monitor/health", timeout=2)
        break
    except OSError:
        time.sleep(0.5)
EOF
PASSWORDS="$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated"
echo "[airflow] ready: http://127.0.0.1:$PORT  (users and passwords: $(cat "$PASSWORDS" 2>/dev/null || echo "see $PASSWORDS"))" >&2
# Stay up while the components run; a signal interrupts `wait` and runs the trap.
while true; do
  wait -n "${pids[@]}" 2>/dev/null || true
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "[airflow] a component (pid $pid) exited; see $AIRFLOW_HOME/logs; stopping the rest" >&2
      exit 1
    fi
  done
done
