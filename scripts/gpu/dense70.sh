#!/usr/bin/env bash
# The 70B-class dense test bed on a lent H200 (issue 34: the shape held out of the planner's fit;
# issue 33: the energy counter cross-checked over the study): Llama-3.1-70B's shape cut to 40 of its
# 80 layers (model_shapes/llama3.1-70b-40l, 36.3B parameters, bf16 72.6 GB: one H200) with dummy
# weights, vLLM 0.33.0 (the bundle carried to /tmp/gpu-bundle, as for ray1.sh), the baseline and
# online fp8 weights, at 1, 8 and 32 streams (benchmarks/spaces/vllm-llama3.1-70b-40l-dense.yaml).
#   bash scripts/gpu/dense70.sh study      # HW=h100 on an H100: its bf16 baseline (78 GB) does not fit and is
#                                          # skipped by the planner; fp8 is the borrowed decode line's check
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install, checked
export VLLM_USE_FLASHINFER_SAMPLER=0
case "${1:-}" in
study)
  [[ -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  checked dense70 bash -c 'timeout "$0" "$@" > "$OUT/dense70.txt" 2>&1; echo "search exit $?" >> "$OUT/dense70.txt"' \
    "${DENSE70_TIMEOUT:-520}" $at search --space benchmarks/spaces/vllm-llama3.1-70b-40l-dense.yaml --study dense70 \
    --db "$DB" --logs "$W/logs" --hardware "${HW:-h200}" --nodes 1 --trials 2 --try quantization=fp8 \
    --confirm-rounds 0 --noise-relaunches 0
  save; COLUMNS=220 $at show --db "$DB" --study dense70 > "$OUT/show-dense70.txt" 2>&1
  $at show --db "$DB" --study dense70 --json > "$OUT/show-dense70.json" 2>&1
  tail -25 "$OUT/dense70.txt" ;;
*) echo "usage: $0 study" >&2; exit 2 ;;
esac
