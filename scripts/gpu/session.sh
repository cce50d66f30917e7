#!/usr/bin/env bash
# The GPU session on a lent H200 machine, in stages that each fit one 10-minute call, run back to
# back (the machine is given back 30 s after a call). Results go to $OUT; runs.db and logs persist
# in /tmp/autotune between stages.
#   bash scripts/gpu/session.sh setup   # install the carried bundle, convert Gemma, probe
#   bash scripts/gpu/session.sh study1  # baseline + first tuned trials
#   bash scripts/gpu/session.sh study2  # more trials, cross-check against vllm bench serve, export
#   bash scripts/gpu/session.sh confirm # one interleaved relaunch round of best vs baseline, export
# The failure recordings alone (issue 14; install, Gemma conversion, then every case of
# record_vllm_logs.py, four side by side, no probe):
#   bash scripts/gpu/session.sh record
# The verdict re-run (issues 10 and 14), after setup (which then also records the failure logs):
#   bash scripts/gpu/session.sh verdict          # baseline, draft k=4, a failing KV dtype, a noise relaunch
#   bash scripts/gpu/session.sh verdict-confirm  # the same study resumed: 2 interleaved confirmation rounds, export
set -uo pipefail
# /tmp/site-extra: sentencepiece/protobuf for the tokenizer rebuild, installed only if the machine lacks them
export PYTHONPATH=/tmp/site:$PWD:/tmp/site-extra PYTHONUNBUFFERED=1
W=/tmp/autotune; DB=$W/runs.db; MODEL=/tmp/gemma-hf
mkdir -p "$W/logs"
at="python3 -m autotune"
space=(--space vllm-gemma3-270m --model "$MODEL" --db "$DB" --logs "$W/logs" --confirm-rounds 0)
tries=(--try kv_cache_dtype=fp8 --try attention_backend=TRITON_ATTN,max_num_seqs=32,max_num_batched_tokens=2048
       --try draft_k=4 --try enforce_eager=true)
# one archive per kind: a run brings back only a few files, and $OUT is new in every call
save() { cp "$DB" "$OUT/runs.db" 2>/dev/null; tar czf "$OUT/logs.tgz" -C "$W" logs $(cd "$W" && ls -d recorded 2>/dev/null) 2>/dev/null; }
case "${1:-}" in
setup|record)
  (cd /tmp/gpu-bundle && { [[ -d stage ]] || cat part* | tar x; } && bash stage/install-on-device) || exit 1
  for mod in sentencepiece:sentencepiece google.protobuf:protobuf; do
    python3 -c "import ${mod%%:*}" 2>/dev/null || python3 -m pip install -q --no-index --no-deps \
      --target /tmp/site-extra /tmp/gpu-bundle/extra/${mod##*:}-*.whl
  done
  python3 scripts/gpu/convert_gemma_gguf.py --gguf /tmp/gemma-3-270m-q4_k_m.gguf --out "$MODEL" || exit 1
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
  if [[ $1 == record ]]; then
    timeout 560 python3 scripts/gpu/record_vllm_logs.py --model "$MODEL" --timeout 300 --out "$W/recorded" > "$OUT/record.txt" 2>&1
    echo "record exit $?" >> "$OUT/record.txt"
    save; exit 0
  fi
  python3 -m vllm.entrypoints.cli.main serve --help=all > "$OUT/vllm_serve_help_all.txt" 2>&1
  # real failure logs for tests/logs/, side by side with the probe (small GPU memory each)
  timeout 330 python3 scripts/gpu/record_vllm_logs.py --model "$MODEL" --timeout 300 --out "$W/recorded" > "$OUT/record.txt" 2>&1 &
  timeout 420 $at probe --space vllm-gemma3-270m --model "$MODEL" --db "$DB" --timeout 240 --budget 130 \
    --json > "$OUT/probe.json" 2> "$OUT/probe.err"
  $at probe --space vllm-gemma3-270m --db "$DB" --no-engine > "$OUT/probe.txt" 2>&1
  cp -r autotune-logs/probe "$W/logs/" 2>/dev/null
  wait
  save ;;
study1)
  # --time-budget starts no trial that would not fit; `timeout` stays as the safety net under the 600 s call
  timeout 580 $at search "${space[@]}" --trials 5 --time-budget 9 "${tries[@]}" > "$OUT/study1.txt" 2>&1
  save ;;
study2)
  timeout 340 $at search "${space[@]}" --trials 5 --time-budget 5.5 "${tries[@]}" > "$OUT/study2.txt" 2>&1
  timeout 240 python3 benchmarks/crosscheck_vllm_bench.py --model "$MODEL" --out "$W/xcheck" > "$OUT/crosscheck.txt" 2>&1
  cp "$W/xcheck/crosscheck.json" "$OUT/" 2>/dev/null
  COLUMNS=200 $at show --db "$DB" > "$OUT/show.txt" 2>&1
  $at export --db "$DB" -o "$OUT/recipe.yaml" > /dev/null 2>> "$OUT/show.txt"
  save ;;
confirm)
  timeout 580 $at search "${space[@]}" --trials 5 --time-budget 9 "${tries[@]}" --confirm-rounds 1 > "$OUT/confirm.txt" 2>&1
  COLUMNS=200 $at show --db "$DB" > "$OUT/show.txt" 2>&1
  $at export --db "$DB" -o "$OUT/recipe.yaml" > /dev/null 2>> "$OUT/show.txt"
  save ;;
verdict)
  timeout 590 $at search --space vllm-gemma3-270m --study h200-verdict --model "$MODEL" --db "$DB" --logs "$W/logs" \
    --trials 3 --try draft_k=4 --try kv_cache_dtype=fp8_e5m2 --noise-relaunches 1 --confirm-rounds 0 \
    --time-budget 9.3 > "$OUT/verdict.txt" 2>&1
  echo "search exit $?" >> "$OUT/verdict.txt"
  save ;;
verdict-confirm)
  timeout 560 $at search --space vllm-gemma3-270m --study h200-verdict --model "$MODEL" --db "$DB" --logs "$W/logs" \
    --trials 3 --try draft_k=4 --try kv_cache_dtype=fp8_e5m2 --noise-relaunches 1 --confirm-rounds 2 \
    --time-budget 9 > "$OUT/verdict-confirm.txt" 2>&1
  echo "search exit $?" >> "$OUT/verdict-confirm.txt"
  COLUMNS=200 $at show --db "$DB" --study h200-verdict > "$OUT/show.txt" 2>&1
  $at export --db "$DB" --study h200-verdict -o "$OUT/recipe.yaml" > /dev/null 2>> "$OUT/show.txt"
  save ;;
*) echo "usage: $0 setup|record|study1|study2|confirm|verdict|verdict-confirm" >&2; exit 2 ;;
esac
