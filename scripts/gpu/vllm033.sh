#!/usr/bin/env bash
# vLLM 0.33.0 on a lent H200 (issue 30), after the 55 parts of scripts/gpu/prepare_vllm033_bundle.sh
# were carried to /tmp/gpu-bundle, one per call, back to back. Run from the project root.
#   bash scripts/gpu/vllm033.sh smoke   # install; serve --help=all; one autotune trial of the dummy MiniMax shape
set -uo pipefail
export PYTHONUNBUFFERED=1
W=/tmp/autotune; DB=$W/runs.db
export AUTOTUNE_CACHE=$W/cache
mkdir -p "$W/logs"
case "${1:-}" in
smoke)
  t0=$(date +%s)
  (cd /tmp/gpu-bundle && { [[ -d stage ]] || cat part* | tar x; } && bash stage/install-on-device) > "$OUT/install.txt" 2>&1 \
    || { tail -40 "$OUT/install.txt"; exit 1; }
  echo "install $(( $(date +%s) - t0 )) s" >> "$OUT/install.txt"
  export PYTHONPATH=/tmp/site:$PWD
  df -h /tmp > "$OUT/df.txt" 2>&1
  timeout 90 python3 -m vllm.entrypoints.cli.main serve --help=all > "$OUT/vllm033_serve_help_all.txt" 2>&1
  echo "help exit $?" >> "$OUT/install.txt"
  # engine logs straight into $OUT: a call cut at its limit still brings them back
  timeout "${TRIAL_TIMEOUT:-420}" python3 -m autotune search --space benchmarks/spaces/vllm-minimax-m2-12l-sittings.yaml --study v033 \
    --db "$DB" --logs "$OUT/logs" --trials 1 --confirm-rounds 0 --noise-relaunches 0 --hardware h200 \
    > "$OUT/trial.txt" 2>&1
  echo "search exit $?" >> "$OUT/trial.txt"
  cp "$DB" "$OUT/runs.db" 2>/dev/null
  COLUMNS=220 python3 -m autotune show --db "$DB" --study v033 > "$OUT/show.txt" 2>&1
  tail -5 "$OUT/install.txt"; tail -25 "$OUT/trial.txt" ;;
*) echo "usage: $0 smoke" >&2; exit 2 ;;
esac
