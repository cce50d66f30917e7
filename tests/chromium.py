"""Headless Debian Chromium for tests that look at a page as a person would (`.ci/run` installs
the `chromium` package when it is missing). No network: the page must carry everything it needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed: .ci/run must apt-get install -y chromium")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return found


def _run(page: Path, extra: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        # virtual time: the page's scripts (plotly drawing) finish before the DOM is dumped
        argv = [chromium(), *FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", *extra, page.resolve().as_uri()]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)


def dump_dom(page: Path, timeout_s: float = 120) -> str:
    """The DOM after the page's JavaScript ran."""
    out = _run(page, ["--dump-dom"], timeout_s)
    assert out.returncode == 0 and "<html" in out.stdout, out.stderr[-2000:]
    return out.stdout


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 3000, timeout_s: float = 120) -> Path:
    out = _run(page, [f"--screenshot={png}", f"--window-size={width},{height}"], timeout_s)
    assert out.returncode == 0 and png.exists(), out.stderr[-2000:]
    return png
