#!/usr/bin/env bash
# GuideLLM for the lent GPU machine (issue 32: its goodput profile against the same vLLM autotune
# probed): the wheels of scripts/gpu/guidellm-0.8.1-wheels.txt and an installer, packed into one
# part, .gpu-bundle-guidellm/part00 (about 5 MiB). Carry it beside the vLLM bundle:
#   run(command="mkdir -p /tmp/gpu-guidellm && cp .gpu-bundle-guidellm/part00 /tmp/gpu-guidellm/",
#       carry=[".gpu-bundle-guidellm/part00"])
# `capacity.sh guidellm` installs it into /tmp/guidellm-site (its own target: click 8.4 before the
# image's 8.5, for the guidellm process only) and runs benchmarks/crosscheck_guidellm_goodput.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=.gpu-bundle-guidellm
rm -rf "$out"; mkdir -p "$out/stage/wheels"
grep -v '^#' scripts/gpu/guidellm-0.8.1-wheels.txt > "$out/want.txt"
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 -d "$out/stage/wheels" -r "$out/want.txt"
cat > "$out/stage/install-guidellm" <<'SH'
#!/usr/bin/env bash
set -e
here=$(cd "$(dirname "$0")" && pwd)
python3 -m pip install --quiet --no-deps --no-index --target /tmp/guidellm-site "$here"/wheels/*.whl
mkdir -p /tmp/guidellm-site/bin
printf '#!/bin/sh\nPYTHONPATH=/tmp/guidellm-site${PYTHONPATH:+:$PYTHONPATH} exec python3 -m guidellm "$@"\n' \
  > /tmp/guidellm-site/bin/guidellm
chmod +x /tmp/guidellm-site/bin/guidellm
SH
tar cf "$out/part00" -C "$out" stage
size=$(stat -c %s "$out/part00")
(( size <= 58 * 1024 * 1024 )) || { echo "part00 is $size bytes: over one part's 58 MiB" >&2; exit 1; }
echo "$out/part00: $(ls "$out/stage/wheels" | wc -l) wheels, $(( size / 1024 )) KiB"
