"""What this host is: CPU, memory, GPUs, driver, CUDA, torch, Triton, nvcc.

torch is imported in a child process with a timeout (`_TORCH_SCRIPT`), so a broken CUDA stack can
neither hang nor poison the caller. Every GPU field stays empty on a host without torch or without
a CUDA GPU, and `notes` says which.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.models import DeviceIdentity, GpuIdentity, HostFingerprint

if TYPE_CHECKING:
    from autotune.engines.base import Engine

GIB = 1024**3
_TIMEOUT_S = 60.0

# Runs in a child interpreter; prints one JSON object. Unified memory: vLLM reads
# `is_integrated` from the device properties; GB10 also reports it.
_TORCH_SCRIPT = r"""
import json
out = {"notes": []}
try:
    import torch
except Exception as exc:
    out["notes"].append(f"no torch ({type(exc).__name__}: {exc})")
    print(json.dumps(out)); raise SystemExit(0)
out["torch_version"] = torch.__version__
out["cuda_runtime"] = torch.version.cuda
try:
    out["torch_arch_list"] = list(torch.cuda.get_arch_list())
except Exception:
    out["torch_arch_list"] = []
gpus = []
try:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
except Exception as exc:
    count = 0
    out["notes"].append(f"CUDA init failed ({type(exc).__name__}: {exc})")
for i in range(count):
    props = torch.cuda.get_device_properties(i)
    major, minor = torch.cuda.get_device_capability(i)
    gpu = {
        "index": i,
        "name": props.name,
        "compute_capability": f"sm_{major}{minor}",
        "total_memory_bytes": props.total_memory,
        "is_integrated": bool(getattr(props, "is_integrated", False)),
        "multiprocessor_count": getattr(props, "multi_processor_count", None),
        "free_memory_bytes": None,
    }
    try:
        free, _total = torch.cuda.mem_get_info(i)
        gpu["free_memory_bytes"] = free
    except Exception as exc:
        out["notes"].append(f"GPU {i}: mem_get_info failed ({type(exc).__name__})")
    gpus.append(gpu)
out["gpus"] = gpus
if torch.version.cuda is None:
    out["notes"].append("torch built without CUDA")
print(json.dumps(out))
"""

_TRITON_SCRIPT = "import triton; print(triton.__version__)"


def detect(timeout_s: float = _TIMEOUT_S) -> DeviceIdentity:
    """Identify this host. Never raises for a missing GPU stack: that becomes a note."""
    notes: list[str] = []
    mem = _meminfo()
    torch_facts = _torch_facts(timeout_s, notes)
    driver, nvml_memory_ok = _nvidia_smi(notes)
    gpus = [_gpu(g, nvml_memory_ok) for g in torch_facts.get("gpus", [])]
    notes += torch_facts.get("notes", [])
    if not gpus and not any(n.startswith("no torch") for n in notes):
        notes.append("no CUDA GPU")
    return DeviceIdentity(
        hostname=socket.gethostname(),
        os=_os_name(),
        cpu_model=_cpu_model(),
        cpu_cores=os.cpu_count() or 1,
        memory_total_gb=round(mem["MemTotal"] / GIB, 2),
        memory_available_gb=round(mem["MemAvailable"] / GIB, 2),
        swap_total_gb=round(mem.get("SwapTotal", 0) / GIB, 2),
        swap_free_gb=round(mem.get("SwapFree", 0) / GIB, 2),
        gpus=gpus,
        driver=driver,
        cuda_runtime=torch_facts.get("cuda_runtime"),
        torch_version=torch_facts.get("torch_version"),
        torch_arch_list=torch_facts.get("torch_arch_list", []),
        triton_version=_triton_version(timeout_s),
        nvcc_version=_nvcc_version(),
        notes=notes,
    )


def host_fingerprint(device: DeviceIdentity, engine: Engine) -> HostFingerprint:
    """What a probe result is valid for: this host's GPU stack and the engine build."""
    gpu = device.gpus[0] if device.gpus else None
    return HostFingerprint(
        hostname=socket.gethostname(),
        gpu=f"{len(device.gpus)}x {gpu.name}" if gpu else None,
        compute_capability=gpu.compute_capability if gpu else None,
        driver=device.driver,
        cuda=device.cuda_runtime,
        torch=device.torch_version,
        engine=engine.name,
        engine_version=engine.version(),
    )


def _gpu(facts: dict, nvml_memory_ok: bool | None) -> GpuIdentity:
    # Unified memory: the driver says the GPU is integrated, or NVML cannot report its memory
    # (GB10 answers "N/A"), or it is a GB10 by name.
    unified = bool(facts.get("is_integrated")) or nvml_memory_ok is False or "GB10" in facts["name"]
    total = facts.get("total_memory_bytes")
    free = facts.get("free_memory_bytes")
    return GpuIdentity(
        index=facts["index"],
        name=facts["name"],
        compute_capability=facts["compute_capability"],
        total_memory_gb=round(total / GIB, 2) if total else None,
        free_memory_gb=round(free / GIB, 2) if free is not None else None,
        unified_memory=unified,
        multiprocessor_count=facts.get("multiprocessor_count"),
    )


#: what the torch child sees beyond this interpreter: a change asks it again
_CHILD_ENV = ("PYTHONPATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH")
_torch_answers: dict[tuple[object, ...], tuple[dict, list[str]]] = {}


def _torch_facts(timeout_s: float, notes: list[str]) -> dict:
    """The torch child's answer, asked once per process and environment: importing torch takes
    seconds, and neither the GPUs nor the torch build change while a process runs."""
    key = (sys.executable, timeout_s, *(os.environ.get(name) for name in _CHILD_ENV))
    if key not in _torch_answers:
        asked: list[str] = []
        facts = _ask_torch(timeout_s, asked)
        _torch_answers[key] = (facts, asked)
    facts, asked = _torch_answers[key]
    notes.extend(asked)
    return json.loads(json.dumps(facts))  # a copy: the caller may change it


def _ask_torch(timeout_s: float, notes: list[str]) -> dict:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TORCH_SCRIPT],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        notes.append(f"torch import timed out after {timeout_s:g} s (broken CUDA stack?)")
        return {}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        notes.append(f"torch probe failed (exit {done.returncode}): {last[:200]}")
        return {}
    return json.loads(lines[-1])


def _meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """Bytes per /proc/meminfo key; os.sysconf when /proc is missing."""
    values: dict[str, int] = {}
    try:
        for line in Path(path).read_text().splitlines():
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                factor = 1024 if len(parts) > 1 and parts[1] == "kB" else 1
                values[key] = int(parts[0]) * factor
    except OSError:
        pass
    if "MemTotal" not in values:
        page = os.sysconf("SC_PAGE_SIZE")
        values["MemTotal"] = page * os.sysconf("SC_PHYS_PAGES")
        try:
            values["MemAvailable"] = page * os.sysconf("SC_AVPHYS_PAGES")
        except (ValueError, OSError):
            values["MemAvailable"] = values["MemTotal"]
    values.setdefault("MemAvailable", values.get("MemFree", values["MemTotal"]))
    return values


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None
    # x86 says "model name"; arm64 (GB10's Grace cores) often has only CPU part numbers
    for key in ("model name", "Model", "Hardware", "cpu model"):
        match = re.search(rf"^{key}\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    return platform.processor() or platform.machine() or None


def _os_name() -> str:
    try:
        release = dict(
            line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line
        )
        pretty = release.get("PRETTY_NAME", "").strip('"')
    except OSError:
        pretty = ""
    kernel = f"{platform.system()} {platform.release()} {platform.machine()}"
    return f"{pretty} ({kernel})" if pretty else kernel


def _nvidia_smi(notes: list[str]) -> tuple[str | None, bool | None]:
    """(driver version, whether NVML reports GPU memory); (None, None) without nvidia-smi."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        done = subprocess.run(
            [exe, "--query-gpu=driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        notes.append("nvidia-smi timed out")
        return None, None
    rows = [r.split(",") for r in done.stdout.strip().splitlines() if r.strip()]
    if done.returncode != 0 or not rows:
        notes.append(f"nvidia-smi failed: {(done.stderr or done.stdout).strip()[:200]}")
        return None, None
    driver = rows[0][0].strip()
    memory_ok = all(len(r) > 1 and r[1].strip()[:1].isdigit() for r in rows)
    return driver or None, memory_ok


def _triton_version(timeout_s: float) -> str | None:
    try:
        done = subprocess.run(
            [sys.executable, "-c", _TRITON_SCRIPT],
            capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _nvcc_version() -> str | None:
    exe = shutil.which("nvcc")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return None
    match = re.search(r"release ([\d.]+), V([\d.]+)", done.stdout)
    return match.group(2) if match else (done.stdout.strip().splitlines() or [None])[-1]
