#!/usr/bin/env bash
# A cheaper vLLM start (issue 53) on a lent H100 or H200, with the 0.26.0 bundle (or 0.33.0) carried to
# /tmp/gpu-bundle: Llama-3.1-8B's shape with dummy weights (benchmarks/spaces/vllm-llama3.1-8b-dense.yaml,
# 1, 8 and 32 streams).
#   bash scripts/gpu/startcut.sh ab        # benchmarks/start_cut.py: one round (ROUNDS) of the baseline
#                                          # launched capped (CUDA graphs up to 32) and with vLLM's own 51
#                                          # sizes, in turn; a second call goes on with the next round
#   bash scripts/gpu/startcut.sh jit       # benchmarks/start_cut.py --mode jit: one round (ROUNDS) of the baseline
#                                          # on FLASHINFER with empty kernel caches (a container without the
#                                          # mounted cache), then with the shared ones; call again for round 2
#                                          # (round 1's cold launch fills the shared caches and vLLM's compile cache)
#   bash scripts/gpu/startcut.sh profile   # one start of the baseline with Python's import timer and vLLM's
#                                          # DEBUG log: which imports and steps fill the ~36 s before the
#                                          # engine core's init (returned as startprofile.log.gz)
set -uo pipefail
source "$(dirname "$0")/dummy_common.sh"   # PYTHONPATH, $W, $DB, $at, save, install
export VLLM_USE_FLASHINFER_SAMPLER=0
SPACE=benchmarks/spaces/vllm-llama3.1-8b-dense.yaml
installed() { [[ -f /tmp/site/.installed || -f /tmp/site/.installed-vllm-0.33.0 ]]; }
case "${1:-}" in
ab|jit)
  mode=cap out=startcut
  [[ $1 == jit ]] && mode=jit out=startcut-jit
  installed || install
  timeout "${STARTCUT_TIMEOUT:-560}" python3 benchmarks/start_cut.py --mode $mode --space $SPACE --hardware "${HW:-h100}" \
    --cap 32 --db "$DB" --logs "$W/logs" --rounds "${ROUNDS:-1}" --out "$OUT/$out.json" > "$OUT/$out.txt" 2>&1
  echo "start_cut exit $?" >> "$OUT/$out.txt"
  save; tail -12 "$OUT/$out.txt" ;;
profile)
  installed || install
  timeout "${PROFILE_TIMEOUT:-300}" python3 - "$SPACE" "$W" > "$OUT/startprofile.txt" 2>&1 <<'PY'
import sys, time
from pathlib import Path
from autotune.checkpoint.files import resolve_model
from autotune.engines import get_engine
from autotune.launchers.base import free_port
from autotune.launchers.process import ServerProcess
from autotune.space.candidates import baseline, load_space
space = load_space(sys.argv[1])
engine = get_engine("vllm")
launch = engine.render(baseline(space), resolve_model(space.model), free_port())
server = launch.server.model_copy(update={"env": {**launch.server.env, "PYTHONPROFILEIMPORTTIME": "1",
                                                  "VLLM_LOGGING_LEVEL": "DEBUG"}})
launch = launch.model_copy(update={"nodes": [server]})
log = Path(sys.argv[2]) / "startprofile.log"
t0 = time.monotonic()
with ServerProcess(launch, log, startup_timeout_s=420) as up:
    print(f"healthy after {time.monotonic() - t0:.1f} s")
print(engine.start_parts(log.read_text(errors="replace")))
PY
  echo "profile exit $?" >> "$OUT/startprofile.txt"
  gzip -c "$W/startprofile.log" > "$OUT/startprofile.log.gz" 2>/dev/null
  cat "$OUT/startprofile.txt" ;;
*) echo "usage: $0 ab|jit|profile" >&2; exit 2 ;;
esac
