#!/usr/bin/env bash
# vLLM's Ray executor on one H200 (issue 31 §2): a Ray head on this host and `vllm serve
# --distributed-executor-backend ray` at TP 1 through `--launcher ray --nodes 1`, the one-Spark case
# of the multi-node path. On a lent `nvidia-h200` machine, in stages that each fit one 10-minute
# call, run back to back. Bundle: ../shared/gpu/prepare-bundle --with-ray plus the --also list of
# ../shared/gpu/README.md (Gemma), its parts carried to /tmp/gpu-bundle first, as for session.sh.
#   bash scripts/gpu/ray1.sh setup    # install, convert Gemma, record the NCCL this host has (nccl.txt)
#   bash scripts/gpu/ray1.sh ray      # baseline + 2 candidates of the Gemma space through the Ray launcher
#   bash scripts/gpu/ray1.sh kill9    # the same study resumed, autotune killed with SIGKILL mid-trial
#   bash scripts/gpu/ray1.sh process  # the same candidates under the process launcher (time breakdown)
#   bash scripts/gpu/ray1.sh report   # show of both studies, phase seconds side by side
# After each trial and after the kill -9, teardown.txt says: no raylet, no vLLM worker, and the
# GPU's memory back to what it was before the study (idle.txt).
set -uo pipefail
export PYTHONPATH=/tmp/site:$PWD:/tmp/site-extra PYTHONUNBUFFERED=1
W=/tmp/autotune; DB=$W/runs.db; MODEL=/tmp/gemma-hf
mkdir -p "$W/logs"
at="python3 -m autotune"
# baseline + 2 candidates: what the Ray and the process launcher both run
tries=(--try max_num_seqs=32 --try enforce_eager=true)
common=(--space vllm-gemma3-270m --model "$MODEL" --db "$DB" --logs "$W/logs" --hardware h200 --nodes 1
        --confirm-rounds 0 --noise-relaunches 0 --trials 3 --no-accuracy "${tries[@]}")
save() {
  cp "$DB" "$OUT/runs.db" 2>/dev/null; tar czf "$OUT/logs.tgz" -C "$W" logs 2>/dev/null
  COLUMNS=220 $at show --db "$DB" > "$OUT/show.txt" 2>&1
}
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }
teardown_check() {  # $1: when; appends to teardown.txt, exits non-zero on anything left
  local raylets vllm used idle
  raylets=$(pgrep -fc 'ray.*raylet' || true); vllm=$(pgrep -fc 'vllm.entrypoints|RayWorkerWrapper' || true)
  for _ in $(seq 1 30); do used=$(gpu_used); idle=$(cat "$W/idle.txt"); (( used <= idle + 64 )) && break; sleep 1; done
  echo "$1: raylets left $raylets, vllm processes left $vllm, GPU memory ${used} MiB (idle ${idle} MiB)" \
    | tee -a "$OUT/teardown.txt"
  [[ $raylets == 0 && $vllm == 0 ]] && (( used <= idle + 64 ))
}
cluster_file() {
  ip=$(python3 -c "from autotune.launchers.cluster import host_ip; print(host_ip())")
  cat > "$W/cluster.yaml" <<EOF
gpus_per_node: 1
rdma: false
nodes:
  - {ip: $ip, gpus: "0", temp_dir: /tmp/at-r0}
EOF
}
# every trial's end: a watcher notes the teardown after each "trial N finished" line of the search
watch_trials() {  # $1: the search's output file
  local seen=0
  while sleep 2; do
    n=$(grep -c '^trial .* (#[0-9]*)' "$1" 2>/dev/null || echo 0)
    if (( n > seen + 1 )); then teardown_check "between trials $seen and $((seen + 1))" || true; fi
    seen=$(( n > 0 ? n - 1 : 0 )); pgrep -f "autotune search" > /dev/null || break
  done
}
case "${1:-}" in
setup)
  (cd /tmp/gpu-bundle && { [[ -d stage ]] || cat part* | tar x; } && bash stage/install-on-device) > "$OUT/install.txt" 2>&1 \
    || { cat "$OUT/install.txt"; exit 1; }
  for mod in sentencepiece:sentencepiece google.protobuf:protobuf; do
    python3 -c "import ${mod%%:*}" 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
      --target /tmp/site-extra /tmp/gpu-bundle/extra/${mod##*:}-*.whl
  done
  python3 scripts/gpu/convert_gemma_gguf.py --gguf /tmp/gemma-3-270m-q4_k_m.gguf --out "$MODEL" || exit 1
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
  gpu_used > "$W/idle.txt"
  # the NCCL this host would give a multi-node launch, read as the preflight reads it, and torch's own
  python3 -c "from autotune.launchers.nccl import READER; exec(READER)" > "$OUT/nccl.txt" 2>&1
  python3 -c "import torch; print('torch.cuda.nccl.version()', torch.cuda.nccl.version())" >> "$OUT/nccl.txt" 2>&1
  dpkg-query -W 'libnccl*' >> "$OUT/nccl.txt" 2>&1 ;;
ray)
  cluster_file
  timeout 560 $at search "${common[@]}" --study gemma-ray1 --launcher ray --cluster "$W/cluster.yaml" \
    > "$OUT/ray.txt" 2>&1 &
  sleep 5; watch_trials "$OUT/ray.txt"; wait
  echo "search exit $?" >> "$OUT/ray.txt"
  teardown_check "after the study"
  save ;;
kill9)
  # a new study of the same candidates, killed with SIGKILL while trial 1 measures, then resumed
  cluster_file
  $at search "${common[@]}" --study gemma-ray1-kill --launcher ray --cluster "$W/cluster.yaml" > "$OUT/kill.txt" 2>&1 &
  for _ in $(seq 1 240); do grep -q '^trial 2 of' "$OUT/kill.txt" && break; sleep 1; done
  sleep 20
  kill -9 "$(pgrep -f 'autotune search.*gemma-ray1-kill' | head -1)"; sleep 15
  teardown_check "30 s after kill -9 of autotune"
  timeout 400 $at search "${common[@]}" --study gemma-ray1-kill --launcher ray --cluster "$W/cluster.yaml" \
    > "$OUT/resume.txt" 2>&1
  echo "resume exit $?" >> "$OUT/resume.txt"
  teardown_check "after the resumed study"
  save ;;
process)
  timeout 560 $at search "${common[@]}" --study gemma-process1 --launcher process > "$OUT/process.txt" 2>&1
  echo "search exit $?" >> "$OUT/process.txt"
  teardown_check "after the process-launcher study"
  save ;;
report)
  save
  for s in gemma-ray1 gemma-process1 gemma-ray1-kill; do
    COLUMNS=220 $at show --db "$DB" --study $s > "$OUT/show-$s.txt" 2>&1
    $at show --db "$DB" --study $s --json > "$OUT/show-$s.json" 2>&1
  done ;;
*) echo "usage: $0 setup|ray|kill9|process|report" >&2; exit 2 ;;
esac
