"""FAKE: a stand-in GPU host where no GPU runs (CI, this VM).

`h200_host` puts a stand-in `torch` package on the PYTHONPATH of the child process that
autotune.hardware.device.detect starts; it answers as torch 2.11 does on H200 SXMs (the device
properties a lent one-GPU H200 reported: 139.8 GiB, sm_90). Everything after the child's JSON
runs for real."""

from __future__ import annotations

from pathlib import Path

import pytest

H200_TOTAL_BYTES = int(139.8 * 1024**3)  # torch's total_memory on the lent H200 (nvidia-smi: 143,771 MiB)

_TORCH = '''
from types import SimpleNamespace
__version__ = "2.11.0+cu130"
version = SimpleNamespace(cuda="13.0")
_props = SimpleNamespace(name="NVIDIA H200", total_memory={total}, is_integrated=False,
                         multi_processor_count=132)
cuda = SimpleNamespace(
    is_available=lambda: True,
    device_count=lambda: {count},
    get_device_properties=lambda i: _props,
    get_device_capability=lambda i: (9, 0),
    mem_get_info=lambda i: ({total} - 2 * 1024**3, {total}),
    get_arch_list=lambda: ["sm_80", "sm_90", "sm_100", "compute_100"],
)
'''


def h200_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int = 1) -> None:
    """Make this process's device probe see `count` H200s."""
    package = tmp_path / "fake_gpu_site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_TORCH.format(total=H200_TOTAL_BYTES, count=count))
    monkeypatch.setenv("PYTHONPATH", str(package.parent))


def cpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process's device probe see no GPU (a torch that cannot be imported), on any machine."""
    package = tmp_path / "fake_cpu_site" / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('no torch on this stand-in CPU host')\n")
    monkeypatch.setenv("PYTHONPATH", str(package.parent))
