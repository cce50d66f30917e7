"""No engine outlives autotune, however autotune ends (a kill -9, a SIGTERM to a benchmark script
that installs no handler, a crash): vLLM's API server starts its EngineCore as a child in its own
process group, which does not die with its parent, so the kernel's parent-death signal (the direct
child only) left an EngineCore holding 73 GiB of a lent H100 after `timeout` SIGTERMed
benchmarks/ground_truth.py. The engine is the FAKE vLLM (tests/fakes/vllm_site.py), which starts an
EngineCore stand-in the same way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes.vllm_site import FAKE_GEMMA_SPACE, small_model_dir, write_fake_vllm
from procs import processes_mentioning

ROOT = Path(__file__).resolve().parents[1]

SPACE = "name: fake-vllm-reaper\n" + FAKE_GEMMA_SPACE + """knobs:
  - {{name: max_num_seqs, values: [8, 16], default: 8}}
workload:
  decode_max_tokens: 2000
  prompts_per_set: 2
  repeats: 50
  concurrency: [1]
  startup_timeout_s: 60
gates: {{needle: null, qeval: null}}
"""


def engine_cores(model: Path) -> list[int]:
    """The stand-in EngineCore processes serving `model`."""
    return processes_mentioning(f"VLLM::EngineCore {model}")


def gone_within(model: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while engine_cores(model) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not engine_cores(model)


@pytest.fixture
def started(tmp_path):
    """`autotune search` on the stand-in vLLM in a subprocess, once its EngineCore is up."""
    site = write_fake_vllm(tmp_path / "fake_site")
    model = small_model_dir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(model=model))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
           "AUTOTUNE_CACHE": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "autotune", "search", "--space", str(space), "--db", str(tmp_path / "runs.db"),
         "--hardware", "h200", "--trials", "1", "--confirm-rounds", "0", "--no-accuracy", "--study", "a"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not engine_cores(model):
        assert proc.poll() is None, proc.stdout.read().decode()
        assert time.monotonic() < deadline, "the stand-in EngineCore never started"
        time.sleep(0.2)
    yield proc, model
    proc.kill()
    proc.wait()
    for pid in engine_cores(model):  # never leave one behind, whatever the test found
        os.kill(pid, signal.SIGKILL)


@pytest.mark.engine
def test_kill_9_of_autotune_takes_the_engine_core_with_it(started):
    proc, model = started
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert gone_within(model, 20), "the EngineCore outlived a kill -9 of autotune"


@pytest.mark.engine
def test_sigterm_of_autotune_takes_the_engine_core_with_it(started):
    proc, model = started
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert gone_within(model, 20), "the EngineCore outlived a SIGTERM of autotune"


def _group() -> subprocess.Popen:
    """A process group of two sleeps (a leader and its child), as an engine and its EngineCore."""
    return subprocess.Popen(["sh", "-c", "sleep 600 & exec sleep 600"], start_new_session=True)


def test_a_group_stopped_by_autotune_dismisses_its_reaper_which_touches_nothing():
    from autotune.launchers.reap_group import dismiss, group_alive, start_reaper

    group = _group()
    reaper = start_reaper(group.pid)
    os.killpg(group.pid, signal.SIGKILL)
    group.wait()
    deadline = time.monotonic() + 5
    while group_alive(group.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    dismiss(reaper, group.pid)
    assert reaper.returncode == 0  # it read `done` and ended


def test_a_reaper_whose_pipe_closes_without_done_stops_the_whole_group():
    from autotune.launchers.reap_group import group_alive, start_reaper

    group = _group()
    reaper = start_reaper(group.pid)
    assert group_alive(group.pid)
    reaper.stdin.close()  # what the kernel does when autotune dies
    reaper.wait(timeout=20)
    group.wait(timeout=5)
    assert not group_alive(group.pid)
