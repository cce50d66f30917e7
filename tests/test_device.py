"""autotune.hardware.device.detect on this machine (no GPU), plus the torch path through a stand-in module.

The stand-in `torch` below is a FAKE (no GPU can run in CI): a package put on PYTHONPATH that
answers like torch 2.11 on a GB10, so the child-process JSON path and the unified-memory rule
run for real.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from autotune.models import DeviceIdentity
from autotune.hardware import device
from autotune.hardware.device import detect

FAKE_GB10_TORCH = '''
from types import SimpleNamespace
__version__ = "2.11.0+cu130"
version = SimpleNamespace(cuda="13.0")
_props = SimpleNamespace(name="NVIDIA GB10", total_memory=128 * 1024**3, is_integrated=True,
                         multi_processor_count=48)
cuda = SimpleNamespace(
    is_available=lambda: True,
    device_count=lambda: 1,
    get_device_properties=lambda i: _props,
    get_device_capability=lambda i: (12, 1),
    mem_get_info=lambda i: (100 * 1024**3, 128 * 1024**3),
    get_arch_list=lambda: ["sm_90", "sm_100", "sm_120", "compute_120"],
)
'''

HANGING_TORCH = "import time\ntime.sleep(600)\n"


def _meminfo_kb(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def fake_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    package = tmp_path / "fake_site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(package.parent))


def test_detect_on_this_host() -> None:
    ident = detect()
    assert ident.hostname == socket.gethostname()
    assert ident.cpu_cores == os.cpu_count()
    assert ident.memory_total_gb == pytest.approx(_meminfo_kb("MemTotal") / 1024**2, abs=0.01)
    assert 0 < ident.memory_available_gb <= ident.memory_total_gb
    assert ident.swap_total_gb >= ident.swap_free_gb >= 0
    assert ident.os
    if ident.gpus == []:
        assert any(n.startswith("no torch") or n == "no CUDA GPU" for n in ident.notes), ident.notes


def test_json_round_trip() -> None:
    ident = detect()
    assert DeviceIdentity.model_validate_json(ident.model_dump_json()) == ident


def test_no_torch_means_no_gpus_and_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch(tmp_path, monkeypatch, "raise ImportError('torch is broken here')\n")
    ident = detect()
    assert ident.gpus == [] and ident.torch_version is None
    assert any("no torch" in n and "torch is broken here" in n for n in ident.notes)


def test_gb10_through_the_torch_child_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch(tmp_path, monkeypatch, FAKE_GB10_TORCH)
    ident = detect()
    assert ident.torch_version == "2.11.0+cu130"
    assert ident.cuda_runtime == "13.0"
    assert ident.torch_arch_list == ["sm_90", "sm_100", "sm_120", "compute_120"]
    (gpu,) = ident.gpus
    assert gpu.name == "NVIDIA GB10"
    assert gpu.compute_capability == "sm_121"
    assert gpu.unified_memory is True
    assert gpu.total_memory_gb == 128.0 and gpu.free_memory_gb == 100.0
    assert gpu.multiprocessor_count == 48


def test_hanging_torch_import_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch(tmp_path, monkeypatch, HANGING_TORCH)
    ident = detect(timeout_s=2)
    assert ident.gpus == []
    assert any("timed out" in n for n in ident.notes)


def test_unified_memory_rule() -> None:
    base = {"index": 0, "name": "NVIDIA H200", "compute_capability": "sm_90", "total_memory_bytes": 140 * 1024**3}
    assert device._gpu(base, nvml_memory_ok=True).unified_memory is False
    assert device._gpu({**base, "is_integrated": True}, nvml_memory_ok=True).unified_memory is True
    assert device._gpu(base, nvml_memory_ok=False).unified_memory is True  # NVML says N/A, as on GB10
    assert device._gpu({**base, "name": "NVIDIA GB10"}, nvml_memory_ok=None).unified_memory is True


def test_meminfo_falls_back_to_sysconf(tmp_path: Path) -> None:
    values = device._meminfo(str(tmp_path / "no-meminfo"))
    assert values["MemTotal"] > 0 and 0 < values["MemAvailable"] <= values["MemTotal"]


def test_the_torch_child_runs_once_per_process_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing torch takes seconds (2 s here with the CPU build the count extra installs): a process
    that detects twice asks its child once, and asks again when what the child would see changes."""
    import subprocess

    calls: list[list[str]] = []
    real_run = subprocess.run

    def counting(argv, *args, **kwargs):
        if argv[1:2] == ["-c"] and "import torch" in argv[2]:
            calls.append(argv)
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(device.subprocess, "run", counting)
    fake_torch(tmp_path, monkeypatch, FAKE_GB10_TORCH)
    assert detect().torch_version == detect().torch_version == "2.11.0+cu130"
    assert len(calls) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    detect()
    assert len(calls) == 2
