#!/usr/bin/env bash
# vLLM's Ray executor on one H200 (issue 31 §2): a Ray head on this host and `vllm serve
# --distributed-executor-backend ray` at TP 1 through `--launcher ray --nodes 1`, the one-Spark case
# of the multi-node path, on vLLM 0.33.0 with a dense dummy-weight shape (Llama-3.1-8B's,
# benchmarks/spaces/vllm-llama3.1-8b-dense.yaml). On a lent `nvidia-h200` machine, in stages that
# each fit one 10-minute call, run back to back from the project root. Carried first, one part per
# call: the vLLM 0.33.0 bundle (.gpu-bundle-033/partNN, scripts/gpu/prepare_vllm033_bundle.sh) to
# /tmp/gpu-bundle, and ray 2.60.0 + msgpack + protobuf wheels (.gpu-bundle-ray/partNN: a tar of
# raystage/wheels/, split in 58 MiB parts) to /tmp/gpu-bundle-ray.
#   bash scripts/gpu/ray1.sh ray      # install; baseline + 2 candidates through the Ray launcher
#   bash scripts/gpu/ray1.sh kill9    # a new study of the same candidates, autotune killed with SIGKILL mid-trial, resumed
#   bash scripts/gpu/ray1.sh process  # the same candidates under the process launcher (time breakdown),
#                                     # inside an energy counter cross-check (energy-process.json); with
#                                     # either vLLM bundle and no Ray part (the waves of 8 and 32 streams)
#   bash scripts/gpu/ray1.sh report   # show of every study, as text and JSON
# After each trial and after the kill -9, teardown.txt says: no raylet, no vLLM worker, and the
# GPU's memory back to what it was before the study (idle.txt).
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
export PYTHONPATH=$PYTHONPATH:/tmp/site-ray VLLM_USE_FLASHINFER_SAMPLER=0
SPACE=${SPACE:-benchmarks/spaces/vllm-llama3.1-8b-dense.yaml}
tries=(--try quantization=fp8 --try enforce_eager=true)
common=(--space "$SPACE" --db "$DB" --logs "$W/logs" --hardware h200 --nodes 1
        --confirm-rounds 0 --noise-relaunches 0 --trials 3 "${tries[@]}")
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
setup() {  # once per machine: the carried vLLM, ray where its part was carried, the idle GPU memory, the NCCL
  [[ -f $W/idle.txt ]] && return 0
  t0=$(date +%s); install; echo "install $(( $(date +%s) - t0 )) s" >> "$OUT/install.txt"
  if compgen -G "/tmp/gpu-bundle-ray/part*" > /dev/null || [[ -d /tmp/gpu-bundle-ray/raystage ]]; then
    (cd /tmp/gpu-bundle-ray && { [[ -d raystage ]] || cat part* | tar x; }) || exit 1
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-ray \
      /tmp/gpu-bundle-ray/raystage/wheels/ray-*.whl /tmp/gpu-bundle-ray/raystage/wheels/msgpack-*.whl >> "$OUT/install.txt" 2>&1
    python3 -c "import google.protobuf" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
      --target /tmp/site-ray /tmp/gpu-bundle-ray/raystage/wheels/protobuf-*.whl >> "$OUT/install.txt" 2>&1
    python3 -c "import ray, vllm; print('ray', ray.__version__, 'vllm', vllm.__version__)" >> "$OUT/install.txt" 2>&1 || exit 1
  else
    [[ ${1:-} == no-ray ]] || { echo "no Ray part in /tmp/gpu-bundle-ray: carry it first (the header)" >&2; exit 1; }
    python3 -c "import vllm; print('vllm', vllm.__version__, '(no Ray: the process launcher only)')" >> "$OUT/install.txt" 2>&1 || exit 1
  fi
  gpu_used > "$W/idle.txt"
  # the NCCL this host would give a multi-node launch, read as the preflight reads it, and torch's own
  python3 -c "from autotune.launchers.nccl import READER; exec(READER)" > "$OUT/nccl.txt" 2>&1
  python3 -c "import torch; print('torch.cuda.nccl.version()', torch.cuda.nccl.version())" >> "$OUT/nccl.txt" 2>&1
}
teardown_check() {  # $1: when; appends to teardown.txt, fails on anything left
  local raylets vllm used idle
  raylets=$(pgrep -fc 'raylet' || true); vllm=$(pgrep -fc 'vllm.entrypoints|RayWorker|EngineCore' || true)
  for _ in $(seq 1 30); do used=$(gpu_used); idle=$(cat "$W/idle.txt"); (( used <= idle + 64 )) && break; sleep 1; done
  echo "$1: raylets left $raylets, vllm processes left $vllm, GPU memory ${used} MiB (idle ${idle} MiB)" \
    | tee -a "$OUT/teardown.txt"
  [[ $raylets == 0 && $vllm == 0 ]] && (( used <= idle + 64 ))
}
watch_trials() {  # $1: the search's output file; a teardown note between trials
  local seen=0 n
  while sleep 2; do
    n=$(grep -c "^trial .* (#[0-9]*)" "$1" 2>/dev/null); n=${n:-0}
    if (( n > seen + 1 )); then teardown_check "between trials $seen and $((seen + 1))" || true; fi
    seen=$(( n > 0 ? n - 1 : 0 )); pgrep -f "autotune search" > /dev/null || break
  done
}
case "${1:-}" in
ray)
  setup; one_gpu_raylets 1
  timeout "${RAY_TIMEOUT:-480}" $at search "${common[@]}" --study dense-ray1 --launcher ray --cluster "$W/cluster.yaml" \
    > "$OUT/ray.txt" 2>&1 &
  sleep 5; watch_trials "$OUT/ray.txt"; wait
  echo "search exit $?" >> "$OUT/ray.txt"
  teardown_check "after the study"
  save; tail -30 "$OUT/ray.txt"; cat "$OUT/teardown.txt" ;;
kill9)
  # a new study of the same candidates, killed with SIGKILL while trial 1 measures, then resumed
  setup; one_gpu_raylets 1
  touch "$W/kill-start"
  $at search "${common[@]}" --study dense-ray1-kill --launcher ray --cluster "$W/cluster.yaml" > "$OUT/kill.txt" 2>&1 &
  # the kill comes while the first trial measures: its engine answered, its requests are in flight
  for _ in $(seq 1 300); do
    find "$W/logs" -newer "$W/kill-start" -name '*.log' -exec grep -l 'Application startup complete' {} + 2>/dev/null \
      | grep -q . && break
    sleep 1
  done
  sleep 8
  kill -9 "$(pgrep -f 'autotune search.*dense-ray1-kill' | head -1)"; sleep 15
  teardown_check "15 s after kill -9 of autotune"
  timeout "${RESUME_TIMEOUT:-330}" $at search "${common[@]}" --trials 2 --study dense-ray1-kill --launcher ray \
    --cluster "$W/cluster.yaml" > "$OUT/resume.txt" 2>&1
  echo "resume exit $?" >> "$OUT/resume.txt"
  teardown_check "after the resumed study"
  save; tail -12 "$OUT/kill.txt"; tail -20 "$OUT/resume.txt"; cat "$OUT/teardown.txt" ;;
process)
  setup no-ray   # the process launcher needs no Ray: the 8-part vLLM 0.26.0 bundle alone serves (issue 52)
  # inside energy_check.py: the study's GPU joules by NVML's counter and by nvidia-smi's power samples
  checked process bash -c 'timeout "$0" "$@" > "$OUT/process.txt" 2>&1; echo "search exit $?" >> "$OUT/process.txt"' \
    "${PROCESS_TIMEOUT:-480}" $at search "${common[@]}" --study dense-process1 --launcher process
  teardown_check "after the process-launcher study"
  save; tail -25 "$OUT/process.txt" ;;
report)
  save
  for s in dense-ray1 dense-ray1-kill dense-process1 dense-capacity; do
    COLUMNS=220 $at show --db "$DB" --study $s > "$OUT/show-$s.txt" 2>&1
    $at show --db "$DB" --study $s --json > "$OUT/show-$s.json" 2>&1
  done ;;
*) echo "usage: $0 ray|kill9|process|report" >&2; exit 2 ;;
esac
