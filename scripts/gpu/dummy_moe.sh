#!/usr/bin/env bash
# The dummy-weight MoE test bed on a lent H200 machine (issue 11), in stages that each fit one
# 10-minute call, run back to back (the machine is given back 30 s after a call). Run from the
# project root with the vLLM bundle carried to /tmp/gpu-bundle (../shared/gpu/README.md).
# Results go to $OUT; runs.db, logs and the compile caches persist in /tmp between stages.
#   bash scripts/gpu/dummy_moe.sh qwen     # install the bundle; Qwen3-30B-A3B shape: baseline (cold start)
#   bash scripts/gpu/dummy_moe.sh qwen2    # the same study resumed: fp8 weights, fp8 KV, Marlin MoE, eager
#   bash scripts/gpu/dummy_moe.sh minimax  # MiniMax-M2 shape (12 layers): baseline + tries
#   bash scripts/gpu/dummy_moe.sh aa       # MiniMax baseline relaunched (launch-to-launch noise)
#   bash scripts/gpu/dummy_moe.sh gptoss   # gpt-oss-20b shape (bf16): baseline + tries
#   bash scripts/gpu/dummy_moe.sh knobs    # MiniMax: the knobs not yet measured (CUDA graphs off, max_num_seqs, Triton MoE forced)
#   bash scripts/gpu/dummy_moe.sh gt       # issue 12: the H200 ground truth, resumed from the carried .gt-h200/runs.db
#   bash scripts/gpu/dummy_moe.sh report   # show + export of every study
# Then, on any machine: python3 scripts/gpu/dummy_report.py --db runs.db (table + planner held-out error)
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
study() {  # study SPACE SECONDS MINUTES [--try ...]
  local space=$1 secs=$2 mins=$3; shift 3
  timeout "$secs" $at search --space "$space" --db "$DB" --logs "$W/logs" --confirm-rounds 0 \
    --trials 6 --time-budget "$mins" "$@" > "$OUT/$space.txt" 2>&1
  echo "search exit $?" >> "$OUT/$space.txt"
}
case "${1:-}" in
# Measured 2026-12-01 (docs/measurements.md): a first start on a fresh machine took 284 s (Qwen3
# shape, torch.compile + graph capture cold), later ones 188-193 s for it and 73-121 s for the
# MiniMax shape; a trial is start + ~20 s of measuring. --time-budget starts no trial that would
# not fit; `timeout` stays as the safety net under the 600 s call.
qwen)      # fresh machine: the baseline alone (~300 s of first start and compile)
  install
  study vllm-qwen3-30b-a3b-dummy 540 8.5 --try quantization=fp8
  save ;;
qwen2)     # same study, resumed: the next tries (~210 s each)
  install
  study vllm-qwen3-30b-a3b-dummy 570 9.4 \
    --try quantization=fp8 --try quantization=fp8,kv_cache_dtype=fp8 --try quantization=fp8,moe_backend=marlin \
    --try quantization=fp8,enforce_eager=true
  save ;;
minimax)   # baseline + tries (~110-130 s each once the machine is warm)
  install
  study vllm-minimax-m2-12l-dummy 560 9 \
    --try quantization=fp8 --try quantization=fp8,kv_cache_dtype=fp8 --try kv_cache_dtype=fp8 \
    --try quantization=fp8,moe_backend=marlin
  save ;;
aa)        # the MiniMax baseline launched again in a study of its own: launch-to-launch noise
  install
  timeout 200 $at search --space vllm-minimax-m2-12l-dummy --study minimax-aa-relaunch --db "$DB" \
    --logs "$W/logs" --confirm-rounds 0 --trials 1 > "$OUT/minimax-aa.txt" 2>&1
  save ;;
knobs)     # the MiniMax study resumed (its baseline is measured again if this is a fresh machine)
  install
  study vllm-minimax-m2-12l-dummy 570 9.3 \
    --try enforce_eager=true --try max_num_seqs=32 --try quantization=fp8,moe_backend=triton
  save ;;
gptoss)
  install
  study vllm-gpt-oss-20b-dummy 560 9 --try quantization=fp8 --try quantization=fp8,kv_cache_dtype=fp8
  save ;;
gt)        # 16 candidates x 2 launches, ~2 min each: about 3 sittings. Carry .gt-h200 (run's carry list)
           # GT_LAUNCHES=1 fills one launch of every candidate first (launch1 study) before the repeats.
  install  # and copy $OUT/runs.db back to .gt-h200/runs.db after each sitting.
  mkdir -p .gt-h200 && cp .gt-h200/runs.db "$W/gt-runs.db" 2>/dev/null
  # no runs.db carried or left by an earlier stage of this machine: rebuild it from the committed table
  [[ -f $W/gt-runs.db ]] || python3 benchmarks/ground_truth.py restore benchmarks/data/gt-vllm-minimax-h200.json \
    --space benchmarks/spaces/vllm-minimax-m2-12l-gt16.yaml --db "$W/gt-runs.db" --logs "$W/logs" --hardware h200 \
    > "$OUT/restore.txt" 2>&1 || { cat "$OUT/restore.txt"; exit 1; }
  # GT_BUDGET (minutes) and GT_TIMEOUT (seconds) shrink the sitting where the call has other work
  timeout "${GT_TIMEOUT:-570}" python3 benchmarks/ground_truth.py measure --space benchmarks/spaces/vllm-minimax-m2-12l-gt16.yaml \
    --db "$W/gt-runs.db" --logs "$W/logs" --launches "${GT_LAUNCHES:-2}" --no-accuracy --hardware h200 --time-budget "${GT_BUDGET:-9.2}" \
    > "$OUT/gt.txt" 2>&1
  echo "measure exit $?" >> "$OUT/gt.txt"
  DB=$W/gt-runs.db save ;;  # save brings the ground-truth db back as $OUT/runs.db
report)
  save
  for s in $(python3 -c "import sqlite_utils; print(' '.join(r['name'] for r in sqlite_utils.Database('$DB')['tuning_studies'].rows))"); do
    $at export --db "$DB" --study "$s" -o "$OUT/recipe-$s.yaml" > /dev/null 2>> "$OUT/show.txt"
  done ;;
*) echo "usage: $0 qwen|qwen2|minimax|aa|gptoss|knobs|gt|report" >&2; exit 2 ;;
esac
