#!/usr/bin/env bash
# Rehearse a GPU stage on a machine with no GPU before it spends device time: the stage script runs
# unchanged, with the STAND-IN vLLM 0.33.0 of tests/fakes/vllm_site.py in /tmp/site (where the
# bundle installs the real one) and a no-op install. It catches what breaks a call whatever the GPU
# does (a flag autotune refuses, a space that does not load, a missing file, a shell error); the
# numbers it prints come from the stand-in and mean nothing. What needs vLLM's own modules
# (scripts/check_vllm_argv.py) or a GPU (NVML, nvidia-smi, an energy objective) fails here by design.
# Rehearsed 2026-12-05: capacity.sh study, dense70.sh study, energy.sh study/report, vllm033.sh
# study/resume ran to their end.
#   bash scripts/gpu/rehearse.sh [--fresh] capacity.sh study      (from anywhere in the project)
# Results go to a new folder under /tmp (printed first). runs.db and logs stay in /tmp/autotune between
# rehearsals, as between the stages of one lent machine (vllm033.sh study, then resume); --fresh
# empties it first. Refused where nvidia-smi runs, or where /tmp/site, /tmp/gpu-bundle, /tmp/autotune
# or /tmp/gemma-hf hold something a rehearsal did not write.
set -uo pipefail
cd "$(dirname "$0")/../.."
fresh=0; [[ ${1:-} == --fresh ]] && { fresh=1; shift; }
[[ $# -ge 1 && -f scripts/gpu/$1 ]] || { echo "usage: $0 STAGE_SCRIPT [ARGS...] (a script in scripts/gpu/)" >&2; exit 2; }
if command -v nvidia-smi > /dev/null 2>&1 && nvidia-smi > /dev/null 2>&1; then
  echo "a GPU answers here: run the stage itself, not a rehearsal" >&2; exit 2
fi
for d in /tmp/site /tmp/gpu-bundle /tmp/autotune /tmp/gemma-hf; do
  if [[ -e $d && ! -e $d/.rehearsal ]]; then echo "$d exists and is not a rehearsal's: move it away first" >&2; exit 2; fi
done
rm -rf /tmp/site /tmp/gpu-bundle
(( fresh )) && rm -rf /tmp/autotune
mkdir -p /tmp/autotune && touch /tmp/autotune/.rehearsal
python3 - <<'PY' || exit 1
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from fakes.vllm_site import write_fake_vllm
site = write_fake_vllm(Path("/tmp/site"), "0.33.0")
for name in (".rehearsal", ".installed-vllm-0.33.0"):
    (site / name).touch()
# the converted Gemma the gemma and record stages serve: its config.json only (the stand-in reads no weights)
gemma = Path("/tmp/gemma-hf")
gemma.mkdir(exist_ok=True)
(gemma / ".rehearsal").touch()
(gemma / "config.json").write_text(
    '{"architectures": ["Gemma3ForCausalLM"], "head_dim": 256, "num_attention_heads": 4, "num_key_value_heads": 1}')
PY
mkdir -p /tmp/gpu-bundle/stage && touch /tmp/gpu-bundle/.rehearsal
printf '#!/usr/bin/env bash\necho "rehearsal: nothing installed (the stand-in vLLM is in /tmp/site)"\n' \
  > /tmp/gpu-bundle/stage/install-on-device
OUT=$(mktemp -d /tmp/rehearsal-XXXX); export OUT
echo "rehearsal of scripts/gpu/$*: results in $OUT"
t0=$(date +%s)
bash "scripts/gpu/$1" "${@:2}"
rc=$?
echo "stage exit $rc in $(( $(date +%s) - t0 )) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
exit $rc
