#!/usr/bin/env bash
# Capacity under a latency target on a lent H200 (issue 32's GPU half): vLLM 0.33.0 (its bundle
# carried to /tmp/gpu-bundle, as for ray1.sh) serving Llama-3.1-8B's shape with dummy weights,
# objective capacity_at_slo (benchmarks/spaces/vllm-llama3.1-8b-capacity.yaml): the baseline and
# online fp8 weights, each searched for the most streams within TTFT 1 s and ITL 12 ms.
#   bash scripts/gpu/capacity.sh study      # HW=h100 on an H100 (the profile memory is planned with)
#   bash scripts/gpu/capacity.sh guidellm   # the baseline served once; autotune's capacity search and
#                                           # GuideLLM 0.8.1's goodput profile on it, interleaved (ROUNDS, default 1),
#                                           # GuideLLM's levels GUIDELLM_SECONDS long (default 15);
#                                           # needs .gpu-bundle-guidellm/part00 in /tmp/gpu-guidellm
#                                           # (scripts/gpu/prepare_guidellm_part.sh); GUIDELLM=path skips that install
#   bash scripts/gpu/capacity.sh autotune-side  # the same server and search without GuideLLM, each level printed
#                                               # as judged (INITIAL_STREAMS=N starts the doubling at N)
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
guidellm)
  [[ -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  if [[ -z ${GUIDELLM:-} ]]; then
    [[ -x /tmp/guidellm-site/bin/guidellm ]] || (cd /tmp/gpu-guidellm && tar xf part00 && bash stage/install-guidellm) \
      || { echo "GuideLLM not installed: carry .gpu-bundle-guidellm/part00 to /tmp/gpu-guidellm first" >&2; exit 1; }
  fi
  timeout "${CROSSCHECK_TIMEOUT:-560}" python3 benchmarks/crosscheck_guidellm_goodput.py \
    --space benchmarks/spaces/vllm-llama3.1-8b-capacity.yaml --guidellm "${GUIDELLM:-/tmp/guidellm-site/bin/guidellm}" \
    --out "$W/crosscheck" --rounds "${ROUNDS:-1}" --guidellm-seconds "${GUIDELLM_SECONDS:-15}" \
    ${INITIAL_STREAMS:+--initial-streams $INITIAL_STREAMS} > "$OUT/crosscheck.txt" 2>&1
  echo "crosscheck exit $?" >> "$OUT/crosscheck.txt"
  tar czf "$OUT/crosscheck.tgz" -C "$W" crosscheck 2>/dev/null
  tail -20 "$OUT/crosscheck.txt" ;;
autotune-side)  # autotune's side of the cross-check alone, each level printed as judged (INITIAL_STREAMS to start higher)
  [[ -f /tmp/site/.installed-vllm-0.33.0 ]] || install
  timeout "${CROSSCHECK_TIMEOUT:-560}" python3 benchmarks/crosscheck_guidellm_goodput.py \
    --space benchmarks/spaces/vllm-llama3.1-8b-capacity.yaml --out "$OUT/xc" \
    ${INITIAL_STREAMS:+--initial-streams $INITIAL_STREAMS} > "$OUT/crosscheck-autotune.txt" 2>&1
  echo "crosscheck exit $?" >> "$OUT/crosscheck-autotune.txt"
  rm -f "$OUT/xc/goodput_prompts.jsonl"
  grep -v "^ *$" "$OUT/crosscheck-autotune.txt" | tail -30 ;;
*) echo "usage: $0 study|guidellm|autotune-side" >&2; exit 2 ;;
esac
