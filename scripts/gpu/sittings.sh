#!/usr/bin/env bash
# Issue 27 on a lent H200: one study run in sittings under --time-budget, resumed until its
# confirmation reaches a verdict (rounds accumulate over resumes). Run from the project root with
# the vLLM bundle carried to /tmp/gpu-bundle (../shared/gpu/README.md), stages back to back.
#   bash scripts/gpu/sittings.sh one   # install; sitting 1: baseline (cold start) + fp8, rounds as the budget allows
#   bash scripts/gpu/sittings.sh two   # sittings 2 and 3: each resumes the study under a 4-minute budget
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
sitting() {  # sitting N SECONDS MINUTES
  local n=$1 secs=$2 mins=$3
  timeout "$secs" $at search --space benchmarks/spaces/vllm-minimax-m2-12l-sittings.yaml --study sittings \
    --db "$DB" --logs "$W/logs" --trials 2 --try quantization=fp8 --confirm-rounds 2 --noise-relaunches 0 \
    --time-budget "$mins" > "$OUT/sitting$n.txt" 2>&1
  echo "search exit $?" >> "$OUT/sitting$n.txt"
  python3 -c "import sqlite_utils, sys; db = sqlite_utils.Database('$DB')
for r in db['confirmation_launches'].rows: print(r)
for r in db['confirmations'].rows: print(r['result'])" > "$OUT/confirmation$n.txt" 2>&1
}
case "${1:-}" in
one)
  install
  sitting 1 520 8.0
  save ;;
two)
  sitting 2 290 4.2
  sitting 3 290 4.2
  save
  $at export --db "$DB" --study sittings -o "$OUT/recipe.yaml" > "$OUT/export.txt" 2>&1 ;;
*) echo "usage: $0 one|two" >&2; exit 2 ;;
esac
