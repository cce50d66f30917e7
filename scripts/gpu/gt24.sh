#!/usr/bin/env bash
# Issue 53's ground-truth table on a lent H100 (never an H200: one card kind per table), vLLM 0.26.0
# from the 7-part bundle carried to /tmp/gpu-bundle: benchmarks/spaces/vllm-llama3.1-8b-gt24.yaml,
# 24 candidates under capacity_at_slo, a second launch of every third (8) six candidates later.
# Two ways to run it; both carry .gt-h100/runs.db (run's carry list) where an earlier call of this
# session returned one, else the committed table is restored:
#   bash scripts/gpu/gt24.sh measure   # one sitting inside one call: GT_BUDGET minutes (9.0), cut at GT_TIMEOUT s (570)
#   bash scripts/gpu/gt24.sh start     # the table in its own process session, so it runs on after the call returns
#                                      # (a call's other processes end with it): GT_BUDGET minutes (default 24) of
#                                      # launches, cut GT_GRACE s (300) after; then it follows the job as `wait` does
#   bash scripts/gpu/gt24.sh wait      # follow the job until GT_WAIT s (560) from this call's start, or until it ends; call
#                                      # again at once (start counts its install in the same 560 s: a call is cut at 600)
#                                      # (a machine left idle 30 s goes back, and the job with it)
# Each call brings back runs.db (a consistent copy while the job writes it), gt24.txt, logs.tgz and show.txt.
# Afterwards: copy the returned runs.db to .gt-h100/runs.db, then here (no GPU needed)
#   python benchmarks/ground_truth.py export --db .gt-h100/runs.db --out benchmarks/data/gt-vllm-llama8b-capacity-h100.json \
#     --space-file benchmarks/spaces/vllm-llama3.1-8b-gt24.yaml --command "bash scripts/gpu/gt24.sh start"
# and commit the table: the next session restores it.
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
export VLLM_USE_FLASHINFER_SAMPLER=0
SPACE=benchmarks/spaces/vllm-llama3.1-8b-gt24.yaml
TABLE=benchmarks/data/gt-vllm-llama8b-capacity-h100.json
GTDB=$W/gt24.db
PIDFILE=$W/gt24.pid
LOG=$W/gt24.txt

prepare() {  # the bundle installed, the table's runs.db in place
  [[ -f /tmp/site/.installed || -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  [[ -f .gt-h100/runs.db && ! -f $GTDB ]] && cp .gt-h100/runs.db "$GTDB"
  if [[ ! -f $GTDB && -f $TABLE ]]; then
    python3 benchmarks/ground_truth.py restore "$TABLE" --space $SPACE --db "$GTDB" --logs "$W/logs" --hardware h100 \
      > "$OUT/restore.txt" 2>&1 || { cat "$OUT/restore.txt"; exit 1; }
  fi
}
job_pid() {  # the background job's session while a process of it runs (timeout runs in a group of its own), else nothing
  [[ -f $PIDFILE ]] && pgrep -s "$(cat "$PIDFILE")" > /dev/null && cat "$PIDFILE"
}
free_gpu() {  # a process an earlier call left on the GPU refuses every launch ("Free memory on device ..."): stop it
  local pids
  pids=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' ')
  [[ -z $pids ]] && return 0
  echo "stopping what an earlier call left on the GPU:"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
  kill -9 $pids 2>/dev/null; sleep 5
}
measure_cmd() {  # $1: minutes of launches
  echo python3 benchmarks/ground_truth.py measure --space $SPACE --db "$GTDB" --logs "$W/logs" \
    --launches 2 --repeat-every 3 --repeat-lag 6 --no-accuracy --hardware h100 --time-budget "$1"
}
bring_back() {  # the job's output, and save's runs.db, logs and show from a snapshot (sqlite's backup: consistent while the job writes)
  python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))" "$GTDB" "$W/snapshot.db"
  cp "$LOG" "$OUT/gt24.txt" 2>/dev/null
  DB=$W/snapshot.db save
}
follow() {  # until the job ends or GT_WAIT s have passed since this call began (start's install included)
  local pid
  while pid=$(job_pid) && (( SECONDS < ${GT_WAIT:-560} )); do sleep 5; done
  bring_back
  tail -8 "$LOG"
  if pid=$(job_pid); then echo "job: running (session $pid): call wait again"; else echo "job: ended"; fi
}

case "${1:-}" in
measure)
  prepare
  timeout "${GT_TIMEOUT:-570}" $(measure_cmd "${GT_BUDGET:-9.0}") > "$OUT/gt24.txt" 2>&1
  echo "measure exit $?" >> "$OUT/gt24.txt"
  DB=$GTDB save; tail -15 "$OUT/gt24.txt" ;;
start)
  if pid=$(job_pid); then echo "the table's job runs already (session $pid): bash $0 wait" >&2; exit 2; fi
  prepare
  free_gpu
  budget=${GT_BUDGET:-24}
  cut=$(python3 -c "print(int(float('$budget') * 60 + ${GT_GRACE:-300}))")
  setsid bash -c "echo \$\$ > '$PIDFILE'; timeout $cut $(measure_cmd "$budget") > '$LOG' 2>&1; echo \"measure exit \$?\" >> '$LOG'" \
    < /dev/null > /dev/null 2>&1 &
  sleep 2
  echo "started: $budget min of launches, cut at $cut s"
  follow ;;
wait)
  [[ -f $GTDB ]] || { echo "no table job on this machine (a fresh machine: start it again)" >&2; exit 2; }
  follow ;;
*) echo "usage: $0 measure|start|wait" >&2; exit 2 ;;
esac
