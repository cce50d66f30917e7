"""Probe programs: each runs in its own process and reports what it found as a ProbeResult.

`python -m autotune.probe.programs.kernels NAME`, `python -m autotune.probe.programs.llamacpp_features ...`, the vLLM selector
(`autotune.probe.programs.vllm_features`) and `python -m autotune.probe.programs.tiny_models ...` are started by autotune's probe
runner (autotune/probe/runner.py), never imported by it: a GPU fault poisons only the probe's own
process. Heavy imports (torch, triton, vllm, llama_cpp) happen only inside these processes. A probe
prints its result with `emit`, as the last line on stdout.
"""

from __future__ import annotations

import sys

from autotune.models import ProbeResult


def emit(result: ProbeResult) -> None:
    """Print the result as the last stdout line of a probe process (what the runner parses)."""
    sys.stdout.write("\n" + result.model_dump_json() + "\n")
    sys.stdout.flush()


__all__ = ["emit"]
