#!/usr/bin/env bash
# Issue 53's ground-truth table on a lent H100 (never an H200: one card kind per table), vLLM 0.26.0
# from the 7-part bundle carried to /tmp/gpu-bundle: benchmarks/spaces/vllm-llama3.1-8b-gt24.yaml,
# 24 candidates under capacity_at_slo, a second launch of every third (8) six candidates later.
# Each call is one sitting of ~9 minutes (GT_BUDGET minutes, GT_TIMEOUT seconds); several sessions fill it.
#   bash scripts/gpu/gt24.sh measure   # carry .gt-h100/runs.db (run's carry list) where an earlier sitting
#                                      # of this session returned one; else the committed table is restored
# After each sitting: copy the returned runs.db to .gt-h100/runs.db, then here (no GPU needed)
#   python benchmarks/ground_truth.py export --db .gt-h100/runs.db --out benchmarks/data/gt-vllm-llama8b-capacity-h100.json \
#     --space-file benchmarks/spaces/vllm-llama3.1-8b-gt24.yaml --command "bash scripts/gpu/gt24.sh measure"
# and commit the table: the next session restores it.
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
export VLLM_USE_FLASHINFER_SAMPLER=0
SPACE=benchmarks/spaces/vllm-llama3.1-8b-gt24.yaml
TABLE=benchmarks/data/gt-vllm-llama8b-capacity-h100.json
GTDB=$W/gt24.db
case "${1:-}" in
measure)
  [[ -f /tmp/site/.installed || -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  [[ -f .gt-h100/runs.db && ! -f $GTDB ]] && cp .gt-h100/runs.db "$GTDB"
  if [[ ! -f $GTDB && -f $TABLE ]]; then
    python3 benchmarks/ground_truth.py restore "$TABLE" --space $SPACE --db "$GTDB" --logs "$W/logs" --hardware h100 \
      > "$OUT/restore.txt" 2>&1 || { cat "$OUT/restore.txt"; exit 1; }
  fi
  timeout "${GT_TIMEOUT:-570}" python3 benchmarks/ground_truth.py measure --space $SPACE --db "$GTDB" --logs "$W/logs" \
    --launches 2 --repeat-every 3 --repeat-lag 6 --no-accuracy --hardware h100 --time-budget "${GT_BUDGET:-9.0}" \
    > "$OUT/gt24.txt" 2>&1
  echo "measure exit $?" >> "$OUT/gt24.txt"
  DB=$GTDB save; tail -15 "$OUT/gt24.txt" ;;
*) echo "usage: $0 measure" >&2; exit 2 ;;
esac
