#!/usr/bin/env bash
# vLLM 0.33.0 on a lent H200 (issue 30), after the 55 parts of scripts/gpu/prepare_vllm033_bundle.sh
# were carried to /tmp/gpu-bundle, one per call, back to back. Run from the project root.
#   bash scripts/gpu/vllm033.sh smoke    # install; serve --help=all; one autotune trial of the dummy MiniMax shape
#   bash scripts/gpu/vllm033.sh study    # install; the engine's choices (JSON); the ground-truth space's baseline + 3 candidates, as far as the call goes
#   bash scripts/gpu/vllm033.sh resume   # the same study resumed to its 4 trials; every shipped vLLM space's argv through 0.33's parser
# VLLM_USE_FLASHINFER_SAMPLER=0: 0.33 samples with FlashInfer by default, which JIT-compiles its
# kernels on a first start (minutes) when flashinfer-cubin is not installed; greedy decoding does
# not need it.
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
export VLLM_USE_FLASHINFER_SAMPLER=0
GT="--space benchmarks/spaces/vllm-minimax-m2-12l-gt16.yaml --study v033-gt --db $DB --logs $W/logs --trials 4
  --try quantization=fp8 --try attention_backend=TRITON_ATTN --try kv_cache_dtype=fp8 --confirm-rounds 0
  --noise-relaunches 0 --hardware h200"
case "${1:-}" in
smoke)
  t0=$(date +%s); install; echo "install $(( $(date +%s) - t0 )) s" >> "$OUT/install.txt"
  timeout 90 python3 -m vllm.entrypoints.cli.main serve --help=all > "$OUT/vllm033_serve_help_all.txt" 2>&1
  echo "help exit $?" >> "$OUT/install.txt"
  # engine logs straight into $OUT: a call cut at its limit still brings them back
  timeout "${TRIAL_TIMEOUT:-420}" $at search --space benchmarks/spaces/vllm-minimax-m2-12l-sittings.yaml --study v033 \
    --db "$DB" --logs "$OUT/logs" --trials 1 --confirm-rounds 0 --noise-relaunches 0 --hardware h200 \
    > "$OUT/trial.txt" 2>&1
  echo "search exit $?" >> "$OUT/trial.txt"
  save; tail -5 "$OUT/install.txt"; tail -25 "$OUT/trial.txt" ;;
study)
  t0=$(date +%s); install; echo "install $(( $(date +%s) - t0 )) s" >> "$OUT/install.txt"
  t0=$(date +%s)
  python3 -m autotune.engines.vllm_choices > "$OUT/vllm-0.33.0_choices.json" 2> "$OUT/choices.err"
  echo "choices exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/install.txt"
  timeout "${STUDY_TIMEOUT:-420}" $at search $GT > "$OUT/study1.txt" 2>&1
  echo "search exit $?" >> "$OUT/study1.txt"
  save; tail -4 "$OUT/install.txt"; tail -30 "$OUT/study1.txt" ;;
resume)
  timeout "${STUDY_TIMEOUT:-480}" $at search $GT > "$OUT/study2.txt" 2>&1
  echo "search exit $?" >> "$OUT/study2.txt"
  save
  python3 scripts/check_vllm_argv.py $(ls search_spaces/vllm-*.yaml benchmarks/spaces/vllm-*.yaml) > "$OUT/argv.txt" 2>&1
  echo "check_vllm_argv exit $?" >> "$OUT/argv.txt"
  tail -30 "$OUT/study2.txt"; grep -c ": ok" "$OUT/argv.txt"; grep -v ": ok" "$OUT/argv.txt" | tail -20 ;;
*) echo "usage: $0 smoke|study|resume" >&2; exit 2 ;;
esac
