"""A real study through `--launcher docker` on the REAL local Docker daemon: llama.cpp + Gemma 3
270M in containers of the image scripts/docker_image.sh builds (tests/docker_daemon.py: skipped
without a daemon unless AUTOTUNE_REQUIRE_DOCKER=1, as .ci/run sets). The cluster file names two
"nodes", both this host's daemon, two boxes; llama.cpp runs one node per candidate, so two trials
run side by side by default (`--parallel 2`), each in a container on the box it leased.

The study is killed with SIGKILL while both trials' containers run (the reapers remove them),
resumed to the end, interrupted with Ctrl-C in a second study (autotune removes its containers
itself; with both trials in flight in a test of its own), and the recipe's `export --format
docker` lines are run by hand and answer a completion.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import optuna
import pytest
from optuna.trial import TrialState

from docker_daemon import daemon_image, labelled, wait_until_none
from gemma_space import GEMMA_ON_LLAMACPP
from procs import engine_pids
from real_study import ROOT

from autotune.store import Store

pytestmark = pytest.mark.engine

# Long enough (two prompts of 160 tokens, ~10 s on two cores) that the first trial cannot end
# between its container running and the second's, over ssh too: the kill must find both in flight.
IN_FLIGHT_WORKLOAD = """workload:
  decode_max_tokens: 160
  prompt_sets: [prose]
  prompts_per_set: 2
  repeats: 1
  warmup_requests: 1
  prefill_tokens: []
  startup_timeout_s: 120
"""

SPACE = """
name: docker-study
""" + GEMMA_ON_LLAMACPP + """fixed: {{chat_format: gemma, seed: 1234, n_ctx: 2048, flash_attn: false}}
knobs:
  - {{name: n_threads, values: [1, 2], default: 1}}
""" + IN_FLIGHT_WORKLOAD + """gates: {{needle: null, qeval: null}}
"""


def cluster_file(folder: Path, image: str, model_dir: Path, nodes: list[str]) -> Path:
    """A cluster file of `nodes` (each an address line, "" for the local default) on this host."""
    lines = [f"image: {image}", f"model_dir: {model_dir}", "gpus_per_node: 0", "rdma: false", "nodes:"]
    for address in nodes:
        lines.append(f"  - {{address: {address!r}, ip: 127.0.0.1}}" if address else "  - {ip: 127.0.0.1}")
    path = folder / "cluster.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def search_args(space: Path, cluster: Path, study: str) -> list[str]:
    # two nodes, one per candidate: two trials side by side by default, each on a box of its own
    return ["search", "--space", str(space), "--db", "runs.db", "--study", study, "--launcher", "docker",
            "--cluster", str(cluster), "--nodes", "1", "--trials", "2", "--confirm-rounds", "0"]


def _env(env: dict[str, str] | None) -> dict[str, str]:
    return {**(env or os.environ), "PYTHONPATH": str(ROOT)}


def start_search(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=cwd, env=_env(env), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def run_autotune(args: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None):
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, env=_env(env), text=True,
                          capture_output=True, timeout=timeout)


def wait_for_container(label: str, proc: subprocess.Popen[str], timeout_s: float = 120.0, count: int = 1,
                       running: bool = False) -> list[str]:
    """Wait until `count` containers carry `label` (with `running`: are running)."""
    deadline = time.monotonic() + timeout_s
    while len(names := labelled(label, running=running)) < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            out = proc.communicate(timeout=10)[0] if proc.poll() is not None else "(still running)"
            pytest.fail(f"{count} container(s) labelled {label} never {'ran' if running else 'appeared'}; "
                        f"autotune said:\n{out}")
        time.sleep(0.3)
    return names


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture
def study_space(tmp_path: Path, gemma_gguf: Path) -> tuple[Path, str]:
    alias = f"dock-{uuid.uuid4().hex[:8]}"
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(alias=alias, model=gemma_gguf))
    return space, alias


def run_study_through(tmp_path: Path, space: Path, alias: str, cluster: Path, study: str,
                      env: dict[str, str] | None = None) -> None:
    """Kill -9 with both trials in flight (a container each), check the reapers removed them,
    resume to the end: each cut trial re-run once."""
    label = f"autotune.study={study}"
    proc = start_search(search_args(space, cluster, study), tmp_path, env)
    try:
        wait_for_container(label, proc, count=2, running=True)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert wait_until_none(label) == [], "a container outlived autotune killed with SIGKILL"
        assert not engine_pids(alias)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    resumed = run_autotune(search_args(space, cluster, study), tmp_path, timeout=900, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "best:" in resumed.stdout
    trials = Store(tmp_path / "runs.db").trials(study)
    killed, rest = trials[:2], trials[2:]
    assert all(t.status == "crashed" and "ended during this trial without a result" in t.reason for t in killed), \
        [(t.number, t.status, t.reason) for t in trials]
    assert sorted(t.boxes for t in killed) == [[0], [1]]
    assert sorted(t.candidate.params["n_threads"] for t in rest) == [1, 2] and all(t.status == "ok" for t in rest)
    assert sorted(t.candidate.key() for t in rest) == sorted(t.candidate.key() for t in killed)
    assert all(t.launch.nodes[0].argv[:3] == [sys.executable, "-m", "llama_cpp.server"] for t in rest)
    assert labelled(label) == [] and not engine_pids(alias)


def test_a_study_through_docker_is_killed_resumed_interrupted_and_its_export_runs_by_hand(tmp_path, study_space,
                                                                                            gemma_gguf):
    space, alias = study_space
    cluster = cluster_file(tmp_path, daemon_image(), gemma_gguf.parent, ["", "unix:///var/run/docker.sock"])
    run_study_through(tmp_path, space, alias, cluster, "dock")
    logs = tmp_path / "autotune-logs" / "dock"
    for killed in ("trial-000", "trial-001"):
        assert "reaper: removed" in (logs / f"{killed}.reaper.log").read_text()
        assert (logs / f"{killed}.node0-server.log").exists()  # saved by the reaper before it removed the container
    assert "Uvicorn running on" in (logs / "trial-002.node0-server.log").read_text()

    # Ctrl-C: autotune removes the trial's containers itself before it exits
    proc = start_search(search_args(space, cluster, "dock-int"), tmp_path)
    try:
        wait_for_container("autotune.study=dock-int", proc)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    assert labelled("autotune.study=dock-int") == [], "Ctrl-C left a container"

    # the recipe's docker lines, run by hand, serve the model
    export = run_autotune(["export", "--db", "runs.db", "--study", "dock", "--format", "docker", "--cluster",
                           str(cluster), "-o", "run.sh"], tmp_path, timeout=120)
    assert export.returncode == 0, export.stdout + export.stderr
    script = (tmp_path / "run.sh").read_text()
    assert f"-v {gemma_gguf.parent}:{gemma_gguf.parent}:ro" in script and "--network host" in script
    port = int(script.split("--port ")[1].split()[0])
    assert port_free(port), f"port {port}, where the recipe's server listens, is taken on this host"
    try:
        subprocess.run(["sh", "run.sh"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=60,
                            json={"model": alias, "prompt": "The capital of France is", "max_tokens": 8}).json()
        assert answer["usage"]["completion_tokens"] > 0 and answer["choices"][0]["text"].strip()
    finally:
        subprocess.run(["docker", "rm", "-f", "autotune-node0-server"], capture_output=True)


#: how long autotune may take to exit after a Ctrl-C with two trials in flight: remove two containers
#: (`docker rm -f`, a second or two each), shut the local Ray cluster of the box leases down (a few
#: seconds) and record two attempts, with room for a loaded two-core host; well under the 120 s
#: startup timeout that a launch thread still waiting for its removed container's health would take
CTRL_C_EXIT_S = 30.0


def test_ctrl_c_with_two_trials_in_flight_through_docker_then_resume(tmp_path, study_space, gemma_gguf):
    """Two boxes (the cluster file's two nodes), two trials at once, each in its own container; a
    Ctrl-C once both containers run: autotune exits with 130 within CTRL_C_EXIT_S, removes both
    containers, records both attempts `interrupted` on their boxes, and a resume re-runs each once."""
    space, alias = study_space
    cluster = cluster_file(tmp_path, daemon_image(), gemma_gguf.parent, ["", "unix:///var/run/docker.sock"])
    study, label = "dock-par", "autotune.study=dock-par"
    args = search_args(space, cluster, study)  # --parallel 2: the default on two boxes
    proc = start_search(args, tmp_path)
    try:
        wait_for_container(label, proc, count=2, running=True)
        assert len(Store(tmp_path / "runs.db").open_attempts(study)) == 2
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            out = proc.communicate(timeout=CTRL_C_EXIT_S)[0]
        except subprocess.TimeoutExpired:
            pytest.fail(f"autotune did not exit within {CTRL_C_EXIT_S:.0f} s of a Ctrl-C with two trials in flight")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    assert "interrupted: engine processes stopped" in out
    assert labelled(label) == [], f"Ctrl-C left containers ({took:.1f} s after it)"
    store = Store(tmp_path / "runs.db")
    assert [row[0] for row in store.db.execute("PRAGMA integrity_check").fetchall()] == ["ok"]
    cut = store.trials(study)
    assert [t.status for t in cut] == ["interrupted", "interrupted"], [(t.status, t.reason) for t in cut]
    assert all(t.reason.startswith("interrupted (Ctrl-C / SIGTERM)") for t in cut)
    assert sorted(t.boxes for t in cut) == [[0], [1]]  # each on the box it leased
    assert store.open_attempts(study) == [] and list(store.db["study_owners"].rows) == []
    optuna_study = optuna.load_study(study_name=study, storage=store.optuna_storage())
    states = {t.number: (t.state, t.user_attrs.get("autotune_status")) for t in optuna_study.trials}
    assert all(states[t.number] == (TrialState.FAIL, "interrupted") for t in cut), states

    resumed = run_autotune(args, tmp_path, timeout=900)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    trials = Store(tmp_path / "runs.db").trials(study)
    rerun = [t for t in trials if t.status == "ok"]
    assert sorted(t.candidate.key() for t in rerun) == sorted(t.candidate.key() for t in cut)  # each re-run once
    assert len(trials) == 4 and Store(tmp_path / "runs.db").open_attempts(study) == []
    assert labelled(label) == [] and not engine_pids(alias)


def test_the_same_study_through_an_ssh_daemon(tmp_path, study_space, gemma_gguf):
    """Node 0 is `ssh://root@127.0.0.1:PORT`: a real sshd (tests/ssh_daemon.py) in front of this
    host's daemon; every Docker API call of the launcher and of the reaper goes through it."""
    from ssh_daemon import ssh_docker

    space, alias = study_space
    with ssh_docker(tmp_path / "ssh") as (address, env):
        cluster = cluster_file(tmp_path, daemon_image(), gemma_gguf.parent, [address, ""])
        run_study_through(tmp_path, space, alias, cluster, "dock-ssh", env)
        assert "reaper: removed" in (tmp_path / "autotune-logs" / "dock-ssh" / "trial-000.reaper.log").read_text()
    assert "Accepted publickey for root" in (tmp_path / "ssh" / "sshd.log").read_text()
