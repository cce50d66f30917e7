#!/usr/bin/env bash
# Tensor parallel over two GPUs through Ray (issue 16), on a lent `nvidia-h200-x2` machine, in
# stages that each fit one 10-minute call, run back to back (the machine is given back 30 s after
# a call). Bundle: ../shared/gpu/prepare-bundle --with-ray plus the --also list of
# ../shared/gpu/README.md, its parts carried to /tmp/gpu-bundle first.
#   bash scripts/gpu/tp2.sh tp1     # install; MiniMax-M2 12-layer dummy shape on one GPU (TP=1)
#   bash scripts/gpu/tp2.sh tp2     # the same shape, TP=2 over two raylets pinned one per GPU
#   bash scripts/gpu/tp2.sh report  # show + export of both studies, the planner's predictions
# Each stage leaves nothing running: tp2 ends by checking that no raylet is left and that neither
# GPU holds memory (teardown.txt).
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
space=vllm-minimax-m2-12l-dummy
teardown_check() {
  { echo "raylets left: $(pgrep -fc 'ray.*raylet' || true)"
    echo "vllm left: $(pgrep -fc 'vllm.entrypoints' || true)"
    nvidia-smi --query-gpu=index,memory.used --format=csv,noheader
  } > "$OUT/teardown.txt" 2>&1
  cat "$OUT/teardown.txt"
}
case "${1:-}" in
tp1)
  install
  timeout 560 $at search --space $space --study minimax-tp1 --hardware h200 --nodes 1 --db "$DB" --logs "$W/logs" \
    --confirm-rounds 0 --noise-relaunches 0 --trials 2 --time-budget 9 --try max_num_seqs=32 > "$OUT/tp1.txt" 2>&1
  echo "search exit $?" >> "$OUT/tp1.txt"
  save ;;
tp2)
  install
  one_gpu_raylets 2   # one raylet per GPU on this host: a node of the cluster file is one GPU
  timeout 540 $at search --space $space --study minimax-tp2 --hardware h200 --nodes 2 --cluster "$W/cluster.yaml" \
    --launcher ray --db "$DB" --logs "$W/logs" --confirm-rounds 0 --noise-relaunches 0 --trials 2 --time-budget 8.5 \
    --try max_num_seqs=32 > "$OUT/tp2.txt" 2>&1
  echo "search exit $?" >> "$OUT/tp2.txt"
  teardown_check
  save ;;
report)
  save
  for s in minimax-tp1 minimax-tp2; do
    $at export --db "$DB" --study $s -o "$OUT/recipe-$s.yaml" > /dev/null 2>> "$OUT/show.txt"
  done
  python3 scripts/gpu/dummy_report.py --db "$DB" > "$OUT/report.md" 2>&1 ;;
*) echo "usage: $0 tp1|tp2|report" >&2; exit 2 ;;
esac
