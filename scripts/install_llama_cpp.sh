#!/usr/bin/env bash
# Installs llama-cpp-python (with its server extra) into the active environment, built for a
# baseline this CPU runs rather than for every instruction it advertises, and keeps the wheel
# under ~/.cache/autotune/wheels/<build flags> so the next install does not compile again.
# README's two commands run it before `pip install -e ...`, which then keeps this build.
#
# Why not pip's native build: it compiles ggml with -march=native, which also turns on its AMX
# kernels where the CPU advertises AMX; on the cloud VMs autotune's CI and development run on (Intel
# Xeon), the CPU advertises AMX but faults on its first AMX instruction, so the engine dies at its
# first model load (SIGSEGV or "Illegal instruction"). pip's own wheel cache would hand that broken
# native wheel to every later install, so this one is built with --no-cache-dir.
#
# The baseline, chosen here from what the CPU advertises:
#   x86-64 with AVX2, FMA, F16C and BMI2: those (any x86-64 CPU of the last ten years), no AVX-512 or AMX;
#   x86-64 without them: no -march flags at all (SSE only);
#   aarch64 (a DGX Spark's Grace CPU, Apple or Graviton hosts): llama.cpp's default build.
# CMAKE_ARGS set by the caller wins.
set -euo pipefail
version='llama-cpp-python>=0.3.30'
if [ -z "${CMAKE_ARGS:-}" ] && [ "$(uname -m)" = x86_64 ]; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  have() { for f in "$@"; do case "$flags" in *" $f "*) ;; *) return 1 ;; esac; done; }
  if have avx2 fma f16c bmi2; then
    export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
  else
    export CMAKE_ARGS="-DGGML_NATIVE=OFF"
  fi
fi
key=$(printf '%s' "${CMAKE_ARGS:-default}" | sha1sum | cut -c1-12)
dir="${AUTOTUNE_CACHE:-$HOME/.cache/autotune}/wheels/llama-cpp-$key"
wheel=$(ls "$dir"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python with CMAKE_ARGS='${CMAKE_ARGS:-}' (about 7 minutes on 2 cores, once)"
  pip wheel --no-cache-dir --no-deps -w "$dir" "$version"
  wheel=$(ls "$dir"/llama_cpp_python-*.whl | head -n 1)
fi
pip install --force-reinstall --no-deps "$wheel"
pip install "$(basename "$wheel" | cut -d- -f2 | sed 's/^/llama-cpp-python[server]==/')" --find-links "$dir"
