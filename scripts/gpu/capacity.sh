#!/usr/bin/env bash
# Capacity under a latency target on a lent H200 (issue 32's GPU half): vLLM 0.33.0 (its bundle
# carried to /tmp/gpu-bundle, as for ray1.sh) serving Llama-3.1-8B's shape with dummy weights,
# objective capacity_at_slo (benchmarks/spaces/vllm-llama3.1-8b-capacity.yaml): the baseline and
# online fp8 weights, each searched for the most streams within TTFT 1 s and ITL 12 ms.
#   bash scripts/gpu/capacity.sh study
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
export VLLM_USE_FLASHINFER_SAMPLER=0
case "${1:-}" in
study)
  [[ -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  timeout "${CAPACITY_TIMEOUT:-540}" $at search --space benchmarks/spaces/vllm-llama3.1-8b-capacity.yaml \
    --study dense-capacity --db "$DB" --logs "$W/logs" --hardware ${HW:-h200} --trials 2 --try quantization=fp8 \
    --confirm-rounds 0 --noise-relaunches 0 ${CAPACITY_BUDGET:+--time-budget $CAPACITY_BUDGET} > "$OUT/capacity.txt" 2>&1
  echo "search exit $?" >> "$OUT/capacity.txt"
  save; COLUMNS=220 $at show --db "$DB" --study dense-capacity > "$OUT/show-capacity.txt" 2>&1
  $at show --db "$DB" --study dense-capacity --json > "$OUT/show-capacity.json" 2>&1
  tail -30 "$OUT/capacity.txt" ;;
*) echo "usage: $0 study" >&2; exit 2 ;;
esac
