"""A REAL OpenSSH server on 127.0.0.1 in front of the local Docker daemon, for `ssh://` nodes.

`ssh_docker(folder)` generates a host key and a client key, starts Debian's sshd on a free port
(root login by that key only), and yields the node address `ssh://root@127.0.0.1:PORT` with the
environment to run autotune in. That environment puts an `ssh` first on PATH which is the system
client reading this folder's config (the key, and the host key in known_hosts, checked strictly):
what a person's ~/.ssh/config does for their boxes. Skipped without sshd unless
AUTOTUNE_REQUIRE_DOCKER=1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from autotune.launchers.base import free_port

SSHD = "/usr/sbin/sshd"


@contextmanager
def ssh_docker(folder: Path) -> Iterator[tuple[str, dict[str, str]]]:
    ssh, keygen = shutil.which("ssh"), shutil.which("ssh-keygen")
    if not (os.path.exists(SSHD) and ssh and keygen):
        why = "openssh-server and openssh-client are not installed (apt-get install openssh-server)"
        if os.environ.get("AUTOTUNE_REQUIRE_DOCKER") == "1":
            pytest.fail(f"AUTOTUNE_REQUIRE_DOCKER=1 but {why}")
        pytest.skip(why)
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "client_key"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(folder / name)], check=True)
    (folder / "authorized_keys").write_text((folder / "client_key.pub").read_text())
    port = free_port()
    (folder / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {folder / 'host_key'}\n"
        f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
        f"PidFile {folder / 'sshd.pid'}\n"
    )
    host_key = (folder / "host_key.pub").read_text().split()
    (folder / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (folder / "ssh_config").write_text(
        f"Host 127.0.0.1\n  Port {port}\n  IdentityFile {folder / 'client_key'}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {folder / 'known_hosts'}\n  StrictHostKeyChecking yes\n  BatchMode yes\n"
    )
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec {ssh} -F {folder / "ssh_config"} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(folder / "sshd_config")],
                              stdout=subprocess.DEVNULL, stderr=(folder / "sshd.log").open("wb"))
    try:
        deadline = time.monotonic() + 15
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not start: {(folder / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.1)
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        yield f"ssh://root@127.0.0.1:{port}", env
    finally:
        server.terminate()
        server.wait(timeout=10)
