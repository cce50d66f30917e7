"""Helpers for tests that must prove no engine process outlived them."""

from __future__ import annotations

from pathlib import Path


def engine_pids(alias: str) -> list[int]:
    """llama.cpp server processes serving this test's model alias (read from /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "llama_cpp.server" in cmd and alias in cmd:
                pids.append(int(entry.name))
    return pids
