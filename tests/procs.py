"""Helpers for tests that must prove no engine process outlived them."""

from __future__ import annotations

from pathlib import Path

from autotune.launchers.ray import pid_alive


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


def processes_mentioning(text: str) -> list[int]:
    """Live processes (zombies left out) whose command line holds `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes() and pid_alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found
