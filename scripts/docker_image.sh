#!/usr/bin/env bash
# Builds (or reuses) the llama.cpp engine image for the docker launcher on the local Docker
# daemon, without any container registry, and prints its tag on the last line of stdout.
#
#   1. a Debian root file system from Debian's own packages (debootstrap: python3, venv, libgomp1),
#      brought in with `docker import`;
#   2. a container of it (host network) makes /opt/venv and installs llama-cpp-python[server]
#      from the portable wheel scripts/install_llama_cpp.sh keeps (no compiler in the image),
#      and Ray (the launcher's head and worker containers run `ray start`); then `docker commit`.
# The model is not in the image: the cluster file mounts the host's model folder (`model_dir`).
#
# The tag is autotune-llamacpp:<hash of this script, the llama.cpp script, the wheel's name, the suite, the CPU>.
# An image with that tag on the daemon is reused; else a saved copy under
# ~/.cache/autotune/images/ (AUTOTUNE_CACHE moves it) is loaded; else it is built and saved there.
# Run scripts/install_llama_cpp.sh first (in any venv): its wheel cache is what the image installs.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${AUTOTUNE_CACHE:-$HOME/.cache/autotune}"
suite="${DEBIAN_SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ray='ray==2.60.0'
fail() { echo "docker_image.sh: $*" >&2; exit 1; }

command -v docker >/dev/null || fail "no docker client; install Debian's docker.io"
docker info >/dev/null 2>&1 || fail "no Docker daemon answers (start dockerd first)"
wheel=$(ls "$cache"/wheels/llama-cpp-*/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
[ -n "$wheel" ] || fail "no llama-cpp-python wheel under $cache/wheels; run scripts/install_llama_cpp.sh first"

key=$( (cat scripts/docker_image.sh scripts/install_llama_cpp.sh; basename "$wheel"; echo "$suite $(uname -m)") \
  | sha1sum | cut -c1-12)
tag="autotune-llamacpp:$key"
saved="$cache/images/autotune-llamacpp-$key.tar"

if docker image inspect "$tag" >/dev/null 2>&1; then
  echo "reusing $tag on the daemon" >&2
elif [ -f "$saved" ]; then
  echo "loading $tag from $saved" >&2
  docker load -q -i "$saved" >&2
else
  command -v debootstrap >/dev/null || fail "no debootstrap; install Debian's debootstrap"
  echo "building $tag (debootstrap $suite, then llama-cpp-python and Ray; about 2 minutes)" >&2
  root=$(mktemp -d)
  build="autotune-image-build-$key"
  trap 'rm -rf "$root"; docker rm -f "$build" >/dev/null 2>&1 || true; docker rmi "autotune-base:$key" >/dev/null 2>&1 || true' EXIT
  debootstrap --variant=minbase --include=python3,python3-venv,libgomp1,ca-certificates \
    "$suite" "$root" "$mirror" >"$root.log" 2>&1 || { tail -n 20 "$root.log" >&2; fail "debootstrap failed"; }
  rm -f "$root.log"
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "autotune-base:$key" >/dev/null
  # the host's CA bundle: a TLS-intercepting proxy the host trusts is trusted by pip in the build
  ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
  docker run --name "$build" --network host \
    -v "$ca:/etc/ssl/host-ca.crt:ro" -e PIP_CERT=/etc/ssl/host-ca.crt \
    -v "$PWD/scripts:/build:ro" -v "$cache/wheels:/root/.cache/autotune/wheels:ro" \
    "autotune-base:$key" sh -c "python3 -m venv /opt/venv && . /opt/venv/bin/activate \
      && bash /build/install_llama_cpp.sh && pip install '$ray'" >&2
  docker commit --change 'LABEL autotune.image=llamacpp' "$build" "$tag" >/dev/null
  mkdir -p "$cache/images"
  docker save -o "$saved.partial" "$tag" && mv "$saved.partial" "$saved"
  find "$cache/images" -name 'autotune-llamacpp-*.tar' ! -name "$(basename "$saved")" -delete  # older builds
fi
echo "$tag"
