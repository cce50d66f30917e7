"""Who else holds the GPUs autotune may use, read before the first launch of a study or a probe.

An engine left behind (vLLM's EngineCore outlives a killed API server) or another user's job keeps
its memory, and every launch after it fails with vLLM's "Free memory on device ... less than
desired GPU memory utilization". The study stops at such a launch (signature gpu_memory_in_use);
this names the holders before a launch is spent, from NVML's compute-process list (the note is
output/terminal.py's `holders_note`). A host without NVML (no nvidia-ml-py, no driver, no GPU)
gives no holders.
"""

from __future__ import annotations

import os
from pathlib import Path

from autotune.bench.nvml import Nvml, NvmlUnavailable
from autotune.models import GpuHolder

GIB = 2**30
COMMAND_CHARS = 60


def command_of(pid: int) -> str:
    """The process's command line as `ps` shows it (a process title, like VLLM::EngineCore, where it
    set one), cut to COMMAND_CHARS; '?' where /proc does not show it (another PID namespace)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part)
    return (text[: COMMAND_CHARS - 3] + "...") if len(text) > COMMAND_CHARS else text or "?"


def gpu_holders(visible: str | None) -> list[GpuHolder]:
    """Every process but this one with a compute context on the GPUs `visible` names
    (CUDA_VISIBLE_DEVICES; None: every GPU NVML sees); empty where NVML cannot be read."""
    try:
        nvml = Nvml.open(visible)
    except NvmlUnavailable:
        return []
    try:
        held: list[GpuHolder] = []
        for gpu in sorted(nvml.handles):
            total = nvml.memory_total_b(gpu)
            for pid, used in nvml.compute_processes(gpu):
                if pid == os.getpid():
                    continue
                held.append(GpuHolder(gpu=gpu, pid=pid, command=command_of(pid),
                                      used_gib=None if used is None else used / GIB,
                                      total_gib=None if total is None else total / GIB))
        return held
    finally:
        nvml.close()

