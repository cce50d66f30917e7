"""Other processes holding the GPU before a study starts: said in one note line before the first
launch, with each holder's pid, command and memory, and what to do. On a lent H100 an EngineCore
left behind held 73 GiB and the next three launches failed ("Free memory on device ... on startup is
less than desired GPU memory utilization"); the study now stops at such a launch (signature
gpu_memory_in_use), and this note names the holder before any launch is spent. The GPU is the
FAKE NVML of tests/fakes/nvml.py; the holder is a real process of this machine, so its command is
read as on a GPU host; the engine is the FAKE vLLM (tests/fakes/vllm_site.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.output.terminal import holders_note
from autotune.bench.occupancy import gpu_holders
from autotune.store import Store
from fakes import nvml as fake_nvml
from fakes.nvml import FakeGpu
from fakes.vllm_site import FAKE_GEMMA_SPACE, small_model_dir, use_fake_vllm

GIB = 2**30

SPACE = "name: fake-vllm-holders\n" + FAKE_GEMMA_SPACE + """knobs:
  - {{name: max_num_seqs, values: [8, 16], default: 8}}
workload:
  decode_max_tokens: 16
  prompts_per_set: 1
  repeats: 1
  concurrency: [1]
  startup_timeout_s: 60
gates: {{needle: null, qeval: null}}
"""


@pytest.fixture
def holder():
    """A real process standing in for an EngineCore left behind (its argv is what the note shows)."""
    proc = subprocess.Popen(["sleep", "300"])
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes() and time.monotonic() < deadline:  # Popen (vfork) returns before exec sets the args
        time.sleep(0.01)
    yield proc.pid
    proc.kill()
    proc.wait()


def test_holders_name_each_process_but_not_autotune_itself(monkeypatch, holder):
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(holder, 73 * GIB), (os.getpid(), GIB)]), FakeGpu()])
    [held] = gpu_holders(None)
    assert held.gpu == 0 and held.pid == holder and held.command == "sleep 300"
    assert held.used_gib == pytest.approx(73.0)
    assert held.total_gib == pytest.approx(80.0)


def test_the_note_says_how_much_is_held_by_whom_and_what_to_do(monkeypatch, holder):
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(holder, 73 * GIB), (holder + 1, None)])])
    note = holders_note(gpu_holders(None))
    assert note is not None and "\n" not in note
    assert "GPU 0" in note and "73.0 of 80.0 GiB" in note
    assert f"pid {holder} (sleep 300, 73.0 GiB)" in note
    assert f"pid {holder + 1}" in note and "memory not reported" in note  # a unified-memory GPU gives no figure
    assert f"kill {holder} {holder + 1}" in note and "gpu_memory_utilization" in note
    # a unified-memory GPU (GB10) may give no figure at all: no amount is made up
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(holder, None)])])
    assert holders_note(gpu_holders(None)).startswith(f"GPU 0: held by other processes: pid {holder} (sleep 300, memory not")


def test_a_gpu_nobody_else_holds_and_a_host_without_nvml_give_no_note(monkeypatch):
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(os.getpid(), GIB)])])
    assert gpu_holders(None) == [] and holders_note([]) is None
    fake_nvml.no_nvml(monkeypatch)
    assert gpu_holders(None) == []


def test_only_the_gpus_autotune_may_use_are_read(monkeypatch, holder):
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(holder, 9 * GIB)]), FakeGpu()])
    assert gpu_holders("1") == []
    assert [h.gpu for h in gpu_holders("0")] == [0]


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    use_fake_vllm(tmp_path, monkeypatch)
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("AUTOTUNE_POWERCAP_ROOT", str(tmp_path / "no-powercap"))
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(model=small_model_dir(tmp_path)))
    return space


@pytest.mark.engine
def test_search_notes_the_holder_before_its_first_launch(fake_vllm, tmp_path, monkeypatch, holder, capsys):
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(holder, 73 * GIB)])])
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake_vllm), "--db", str(db), "--hardware", "h200", "--trials", "1",
            "--confirm-rounds", "0", "--no-accuracy", "--study", "h"]
    assert main(args) == 0
    err = capsys.readouterr().err
    [line] = [x for x in err.splitlines() if "held by other processes" in x]
    assert line.startswith("note: GPU 0") and f"pid {holder} (sleep 300, 73.0 GiB)" in line
    assert [t.status for t in Store(db).trials("h")] == ["ok"]  # a note, not a refusal: the stand-in had room


@pytest.mark.engine
def test_a_dry_run_and_a_free_gpu_print_no_such_note(fake_vllm, tmp_path, monkeypatch, holder, capsys):
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(holder, 73 * GIB)])])
    args = ["search", "--space", str(fake_vllm), "--db", str(tmp_path / "runs.db"), "--hardware", "h200"]
    assert main([*args, "--dry-run"]) == 0
    assert "held by other processes" not in capsys.readouterr().err
    fake_nvml.install(monkeypatch, [FakeGpu()])
    assert main([*args, "--trials", "1", "--confirm-rounds", "0", "--no-accuracy", "--study", "f"]) == 0
    assert "held by other processes" not in capsys.readouterr().err


@pytest.mark.engine
def test_probe_notes_the_holder_before_its_launches(fake_vllm, tmp_path, monkeypatch, holder, capsys):
    """`autotune probe` launches vLLM too: the same note before its first launch (here --budget 0:
    the note, then nothing launched), and none for --no-engine."""
    fake_nvml.install(monkeypatch, [FakeGpu(processes=[(holder, 73 * GIB)])])
    args = ["probe", "--space", str(fake_vllm), "--db", str(tmp_path / "runs.db"), "--model", str(tmp_path / "model"),
            "--timeout", "20s"]
    assert main([*args, "--budget", "0"]) == 0
    [line] = [x for x in capsys.readouterr().err.splitlines() if "held by other processes" in x]
    assert line.startswith("note: GPU 0") and f"pid {holder} (sleep 300, 73.0 GiB)" in line
    assert main([*args, "--no-engine", "--refresh"]) == 0
    assert "held by other processes" not in capsys.readouterr().err
