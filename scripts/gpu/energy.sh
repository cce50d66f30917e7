#!/usr/bin/env bash
# Energy per token and the GPU's state on a lent H200 (issue 33), in stages that each fit one
# 10-minute call, run back to back. Run from the project root with the vLLM bundle carried to
# /tmp/gpu-bundle (../shared/gpu/README.md). Results go to $OUT; runs.db and logs persist in /tmp
# between stages of one lent machine. nvidia-ml-py (pynvml) is in the H200 image (13.610.43,
# scripts/gpu/image/h200-pip-freeze.txt). Written 2026-12-03 on the CPU VM; not run yet.
#   bash scripts/gpu/energy.sh counter   # install; NVML's counter over 20 s idle vs nvidia-smi power at 10 Hz
#   bash scripts/gpu/energy.sh study     # MiniMax-M2 shape (dummy weights): baseline, fp8 weights, max_num_seqs 32;
#                                        # every trial records its energy and clocks; the counter cross-checked
#                                        # against nvidia-smi over the whole study
#   bash scripts/gpu/energy.sh tpj       # the same space with objective tokens_per_joule (of the 8-stream wave)
#   bash scripts/gpu/energy.sh report    # show + export of both studies; the J/token ranking beside tok/s
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
SPACE=vllm-minimax-m2-12l-dummy
TRIES="--try quantization=fp8 --try max_num_seqs=32"
rank() {  # the trials of study $1 by tok/s and by tok/J (8-stream wave and 1-stream prose)
  python3 - "$DB" "$1" <<'EOF'
import sys
from autotune.store import Store
trials = [t for t in Store(sys.argv[1]).trials(sys.argv[2]) if t.status == "ok"]
def m(t, name):
    x = t.measurement(name)
    return x.median if x else None
rows = [(t.number, t.objective, m(t, "output_tps.c8"), m(t, "tokens_per_gpu_joule.prose"), m(t, "tokens_per_gpu_joule.c8"),
         m(t, "gpu_power_w.c8"), t.energy.sm_clock_mhz() if t.energy else None, t.energy.throttled if t.energy else None)
        for t in trials]
print("trial objective output_tps.c8 tok/J.prose tok/J.c8 W.c8 sm_mhz throttled")
for r in rows:
    print(*r)
for i, name in ((1, "objective"), (2, "tok/s c8"), (3, "tok/J prose"), (4, "tok/J c8")):
    order = [r[0] for r in sorted((r for r in rows if r[i] is not None), key=lambda r: -r[i])]
    print(f"ranking by {name}: {order}")
EOF
}
case "${1:-}" in
counter)
  install
  python3 scripts/gpu/energy_check.py --seconds 20 > "$OUT/counter-idle.json" 2> "$OUT/counter-idle.err"
  echo "energy_check exit $?" >> "$OUT/counter-idle.err"
  tail -3 "$OUT/counter-idle.err"; python3 -c "
import json; d = json.load(open('$OUT/counter-idle.json'))
print({g: (v['counter_j'], v['nvidia_smi_j'], v['counter_over_smi'], v['samples']) for g, v in d.get('gpus', {}).items()})" ;;
study)   # ~110-130 s a trial once warm; a first start on a fresh machine ~280 s
  install
  python3 scripts/gpu/energy_check.py -- timeout "${STUDY_TIMEOUT:-540}" $at search --space $SPACE --study energy-h200 --db "$DB" \
    --hardware "${HW:-h200}" --logs "$W/logs" --trials "${STUDY_TRIALS:-3}" $TRIES --confirm-rounds 0 --noise-relaunches 0 \
    --time-budget "${STUDY_BUDGET:-8.5}" \
    > "$OUT/study-check.json" 2> "$OUT/study.err"
  echo "energy_check exit $?" >> "$OUT/study.err"
  save; rank energy-h200 > "$OUT/rank.txt" 2>&1; cat "$OUT/rank.txt"; tail -40 "$OUT/show.txt" ;;
tpj)
  install
  python3 -c "
import yaml; d = yaml.safe_load(open('search_spaces/$SPACE.yaml'))
d['name'] = '$SPACE-tpj'; d['objective'] = {'metric': 'tokens_per_joule', 'energy_workload': 'c8'}
yaml.safe_dump(d, open('/tmp/tpj.yaml', 'w'), sort_keys=False)"
  timeout "${TPJ_TIMEOUT:-560}" $at search --space /tmp/tpj.yaml --study energy-h200-tpj --db "$DB" --logs "$W/logs" --hardware "${HW:-h200}" --trials 3 \
    $TRIES --confirm-rounds 0 --noise-relaunches 1 --time-budget "${TPJ_BUDGET:-9}" > "$OUT/tpj.txt" 2>&1
  echo "search exit $?" >> "$OUT/tpj.txt"
  save; rank energy-h200-tpj > "$OUT/rank-tpj.txt" 2>&1; cat "$OUT/rank-tpj.txt"; tail -30 "$OUT/tpj.txt" ;;
report)
  for s in energy-h200 energy-h200-tpj; do
    COLUMNS=220 $at show --db "$DB" --study $s > "$OUT/show-$s.txt" 2>&1
    $at export --db "$DB" --study $s -o "$OUT/recipe-$s.yaml" > /dev/null 2>&1
    $at report --db "$DB" --study $s -o "$OUT/report-$s.html" > /dev/null 2>&1
    rank $s
  done
  save ;;
*) echo "usage: $0 counter|study|tpj|report" >&2; exit 2 ;;
esac
