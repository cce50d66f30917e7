"""A one-node Ray cluster, tried as a new user would (issue 31 §2): `--launcher ray --nodes 1`, with
a one-node cluster file or without one. It is the one-Spark case of the multi-node path: a real Ray
head on this host, then the server with `--distributed-executor-backend ray` at TP 1 (here the
FAKE vLLM of tests/fakes/vllm_site.py, which joins the Ray cluster as vLLM's executor does). A
launch the chosen launcher cannot run is refused before runs.db opens (exit 2), never a crash."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
import tempfile
from pathlib import Path

import pytest
from fakes.vllm_site import FAKE_GEMMA_SPACE, small_model_dir, use_fake_vllm

from autotune.cli import main
from autotune.launchers.cluster import host_ip
from autotune.store import Store
from procs import processes_mentioning
from stand_in import tiny_llamacpp_space

needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")

SPACE = "name: fake-vllm-ray\n" + FAKE_GEMMA_SPACE + """knobs:
  - {{name: max_num_seqs, values: [8, 16], default: 8}}
workload:
  decode_max_tokens: 8
  prompts_per_set: 1
  repeats: 1
  concurrency: [1]
  startup_timeout_s: 120
"""


@pytest.fixture
def ray_root():
    root = Path(tempfile.mkdtemp(prefix="at1"))  # Ray's socket paths must stay short
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fake_space(tmp_path, monkeypatch):
    use_fake_vllm(tmp_path, monkeypatch, name="fake_site")
    model = small_model_dir(tmp_path)
    space = tmp_path / "space.yaml"
    space.write_text(SPACE.format(model=model))
    return space


@needs_ray
@pytest.mark.parametrize("with_file", [True, False], ids=["cluster-file", "no-cluster-file"])
def test_one_node_ray_cluster_runs_vllm_on_the_ray_executor(fake_space, tmp_path, ray_root, capsys, with_file):
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(fake_space), "--db", str(db), "--trials", "2" if with_file else "1", "--confirm-rounds", "0",
            "--noise-relaunches", "0", "--study", "r", "--launcher", "ray", "--nodes", "1", "--logs", str(tmp_path / "logs")]
    if with_file:
        cluster = tmp_path / "cluster.yaml"
        cluster.write_text(f"gpus_per_node: 0\nrdma: false\nnodes:\n  - {{ip: {host_ip()}, num_cpus: 1, temp_dir: {ray_root}/n0}}\n")
        args += ["--cluster", str(cluster)]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    trials = Store(db).trials("r")
    assert [t.status for t in trials] == ["ok"] * (2 if with_file else 1), [t.reason for t in trials]
    for trial in trials:
        assert [(n.node, n.role) for n in trial.launch.nodes] == [(0, "head"), (0, "server")]
        argv = trial.launch.server.argv
        assert argv[argv.index("--distributed-executor-backend") + 1] == "ray"
        assert argv[argv.index("--tensor-parallel-size") + 1] == "1"
        server_log = Path(trial.log_path).read_text()
        assert "1 node(s) alive; tensor_parallel_size=1" in server_log  # the server joined the Ray head
    if with_file:
        assert processes_mentioning(str(ray_root)) == []  # no raylet outlives the study


def test_a_launch_the_ray_launcher_cannot_run_is_refused_before_runs_db(tmp_path, capsys):
    # llama.cpp has no distributed executor: the Ray launcher cannot run it, whatever --nodes says
    space = tiny_llamacpp_space(tmp_path)
    db = tmp_path / "runs.db"
    code = main(["search", "--space", str(space), "--db", str(db), "--trials", "1", "--launcher", "ray", "--nodes", "1"])
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 2, text
    assert not db.exists()
    assert len(text.splitlines()) == 1 and "llamacpp" in text and "ray" in text and "unexpected" not in text


def test_a_candidate_the_ray_launcher_cannot_run_is_skipped_and_a_trial_of_it_fails_not_the_study(tmp_path, fake_space):
    from autotune.commands.setup import prepare
    from autotune.models import Candidate
    from autotune.trial.launch import LaunchRequest
    from autotune.trial.run import EngineLaunch

    text = fake_space.read_text().replace(
        "  - {name: max_num_seqs, values: [8, 16], default: 8}",
        "  - {name: distributed_executor_backend, values: [null, mp], default: null}",
    )
    fake_space.write_text(text)
    plan = prepare(space_name=str(fake_space), model_path=None, db_path=tmp_path / "runs.db", study="s", hardware="cpu",
                   nodes=1, accuracy=False, logs_dir=tmp_path, dry_run=True, launcher="ray")
    mp = Candidate(engine="vllm", params={**plan.space.fixed, "distributed_executor_backend": "mp"})
    assert plan.pruner.reason(mp) == (
        "launch: a Ray cluster launch needs distributed_executor_backend=ray, the candidate has 'mp'"
    )
    result = EngineLaunch()(LaunchRequest(plan.ctx, mp, 3))  # asked anyway (a resumed queue): a failed trial, nothing launched
    assert result.status == "failed" and result.failure.failure_class == "configuration_error"
    assert result.launch is None


def test_one_node_cluster_keeps_the_single_process_layout():
    from autotune.engines.vllm import cluster_params
    from autotune.errors import ConfigError
    from autotune.models import Cluster, ClusterNode

    one = Cluster(nodes=[ClusterNode(ip="10.0.0.1")], gpus_per_node=2)
    assert cluster_params({}, one) == {"distributed_executor_backend": "ray", "tensor_parallel_size": 1}
    assert cluster_params({"tensor_parallel_size": 2}, one)["tensor_parallel_size"] == 2
    with pytest.raises(ConfigError, match="one-node cluster holds 2"):
        cluster_params({"tensor_parallel_size": 4}, one)
