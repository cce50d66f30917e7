#!/usr/bin/env bash
# Installs llama-cpp-python (with its server extra) built for a portable x86-64 baseline
# (AVX2/FMA/F16C, no -march=native) into the active environment, and keeps the wheel under
# ~/.cache/autotune/wheels/<build flags> so the next install does not compile again.
#
# Why: a native build also compiles ggml's AMX kernels when the CPU advertises AMX; on the VMs
# autotune's CI runs on, the CPU advertises AMX but the first AMX instruction (tilezero) faults
# ("Illegal instruction" as soon as the model runs). pip's own wheel cache would hand that broken
# native wheel to every later install, so the portable wheel is built with --no-cache-dir.
set -euo pipefail
version='llama-cpp-python>=0.3.30'
if [ "$(uname -m)" = x86_64 ]; then
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON}"
fi
key=$(printf '%s' "${CMAKE_ARGS:-default}" | sha1sum | cut -c1-12)
dir="${AUTOTUNE_CACHE:-$HOME/.cache/autotune}/wheels/llama-cpp-$key"
wheel=$(ls "$dir"/llama_cpp_python-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$wheel" ]; then
  echo "building llama-cpp-python with CMAKE_ARGS='${CMAKE_ARGS:-}' (about 6-7 minutes on 2 cores)"
  pip wheel --no-cache-dir --no-deps -w "$dir" "$version"
  wheel=$(ls "$dir"/llama_cpp_python-*.whl | head -n 1)
fi
pip install --force-reinstall --no-deps "$wheel"
pip install "$(basename "$wheel" | cut -d- -f2 | sed 's/^/llama-cpp-python[server]==/')" --find-links "$dir"
