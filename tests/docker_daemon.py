"""The REAL local Docker daemon for the tests that need one, and the image they run.

A test asks for `daemon_image()`: the tag of the llama.cpp engine image on the local daemon
(AUTOTUNE_DOCKER_IMAGE, else the newest image scripts/docker_image.sh built: label
autotune.image=llamacpp). Without a daemon or an image the test is skipped with the reason;
with AUTOTUNE_REQUIRE_DOCKER=1 (set by .ci/run) it fails instead, so CI cannot skip them.
"""

from __future__ import annotations

import os
import time

import pytest

IMAGE_LABEL = "autotune.image=llamacpp"
HOW = "start dockerd and build the image: bash scripts/start_dockerd.sh && bash scripts/docker_image.sh"


def _missing(why: str) -> None:
    if os.environ.get("AUTOTUNE_REQUIRE_DOCKER") == "1":
        pytest.fail(f"AUTOTUNE_REQUIRE_DOCKER=1 but {why}")
    pytest.skip(f"{why}; {HOW}")


def daemon_client():
    """A Docker SDK client for the local daemon (skips or fails the test without one)."""
    try:
        import docker
    except ImportError:
        _missing("the docker SDK is not installed (pip install 'autotune[docker]')")
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:  # no socket, no permission, daemon down
        _missing(f"no local Docker daemon answers ({type(exc).__name__}: {exc})")
    return client


def daemon_image() -> str:
    """The llama.cpp engine image's tag on the local daemon."""
    client = daemon_client()
    try:
        wanted = os.environ.get("AUTOTUNE_DOCKER_IMAGE")
        if wanted:
            try:
                client.images.get(wanted)
            except Exception:
                _missing(f"AUTOTUNE_DOCKER_IMAGE={wanted} is not on the local daemon")
            return wanted
        images = [i for i in client.images.list(filters={"label": IMAGE_LABEL}) if i.tags]
        if not images:
            _missing("no image built by scripts/docker_image.sh is on the local daemon")
        return max(images, key=lambda i: i.attrs["Created"]).tags[0]
    finally:
        client.close()


def labelled(label: str, running: bool = False) -> list[str]:
    """Names of the containers carrying `label` (key=value) on the local daemon: all of them, or
    with `running` those running."""
    client = daemon_client()
    try:
        # ignore_removed: a container removed between the list and its inspect is gone, not an error
        found = client.containers.list(all=not running, filters={"label": [label]}, ignore_removed=True)
        return sorted(c.name for c in found)
    finally:
        client.close()


def wait_until_none(label: str, timeout_s: float = 30.0) -> list[str]:
    """Poll until no container carries `label`; what is left when `timeout_s` runs out."""
    deadline = time.monotonic() + timeout_s
    while (left := labelled(label)) and time.monotonic() < deadline:
        time.sleep(0.3)
    return left
