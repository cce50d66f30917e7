"""The commands a Spark owner types first, run as typed on a machine without the boxes (issue 18):
the space is picked for --hardware/--nodes, and dry run and plan show every node's launch."""

from __future__ import annotations

import hashlib

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.space.candidates import DEFAULT_SPACE
from autotune.space.choice import choose_space

CLUSTER = """
nodes:
  - {ip: 10.0.0.1, ifname: enp1s0f1np1, hcas: [rocep1s0f1, roceP2p1s0f1]}
  - {ip: 10.0.0.2, ifname: enp1s0f1np1, hcas: [rocep1s0f1, roceP2p1s0f1]}
  - {ip: 10.0.0.3, ifname: enp1s0f1np1, hcas: [rocep1s0f1, roceP2p1s0f1]}
  - {ip: 10.0.0.4, ifname: enp1s0f1np1, hcas: [rocep1s0f1, roceP2p1s0f1]}
"""


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def node_lines(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith("# node ")]


# ------------------------------------------------------------------ which space


def test_no_options_keeps_the_cpu_default():
    assert choose_space(None, None, None).name == DEFAULT_SPACE == "llamacpp-gemma3-270m"
    assert choose_space(None, None, None).note is None
    assert choose_space(None, "auto", 1).name == DEFAULT_SPACE


def test_search_with_no_options_still_runs_the_cpu_space(capsys, gemma_gguf):
    """The README's first command: no --space, no --hardware, no --nodes."""
    code, out, err = run(capsys, "search", "--dry-run")
    assert code == 0, err
    assert out.startswith("space llamacpp-gemma3-270m:") and "no --space given" not in err


def test_a_named_space_is_used_as_named():
    assert choose_space("vllm-gemma3-270m", "spark", 4).name == "vllm-gemma3-270m"


@pytest.mark.parametrize(
    ("hardware", "nodes", "expected"),
    [
        ("spark", 4, "minimax-m3.1-flash-spark4"),
        ("spark", 1, "minimax-m3.1-flash-spark1"),
        ("spark", None, "minimax-m3.1-flash-spark1"),
        ("cpu", None, "llamacpp-gemma3-270m"),
        ("h200", 1, "vllm-gemma3-270m"),
    ],
)
def test_the_one_space_made_for_the_hardware_is_picked_and_named(hardware, nodes, expected):
    choice = choose_space(None, hardware, nodes)
    assert choice.name == expected
    assert choice.note and f"using {expected}" in choice.note


def test_no_fitting_space_lists_the_candidates_and_the_way_to_your_own(capsys, tmp_path):
    db = tmp_path / "runs.db"
    db.write_bytes(b"not touched")
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    code, out, err = run(capsys, "search", "--hardware", "spark", "--nodes", "2", "--db", str(db))
    assert code == 2
    text = (out + err).strip()
    assert text.startswith("error: no shipped space is made for spark x2")
    assert "minimax-m3.1-flash-spark4 (spark x4)" in text and "minimax-m3.1-flash-spark1 (spark x1)" in text
    assert "autotune space new --model DIR --hardware spark --nodes 2" in text
    assert "--space" in text and "--model DIR" in text
    assert len(text.splitlines()) == 1
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_nodes_without_hardware_asks_for_the_hardware(capsys):
    code, out, err = run(capsys, "plan", "--nodes", "4")
    assert code == 2
    assert "name the hardware (e.g. --hardware spark)" in err
    assert "minimax-m3.1-flash-spark4 (spark x4)" in err


def test_unknown_hardware_is_bad_input():
    with pytest.raises(ConfigError, match="unknown hardware profile 'sparky'"):
        choose_space(None, "sparky", 4)


# ------------------------------------------------------------------ dry run and plan without the boxes


def test_dry_run_as_typed_picks_the_spark4_space_and_shows_four_nodes(capsys):
    code, out, err = run(capsys, "search", "--hardware", "spark", "--nodes", "4", "--dry-run")
    assert code == 0, err
    assert "using minimax-m3.1-flash-spark4, the one shipped space made for spark x4" in err
    assert "space minimax-m3.1-flash-spark4:" in out and "nothing is launched" in out
    assert "hosts are placeholders (192.168.100.1-4" in out
    first = out.split("#1 ")[0]
    assert node_lines(first) == [
        "# node 0 (head)", "# node 1 (worker)", "# node 2 (worker)", "# node 3 (worker)", "# node 0 (server)"
    ]
    assert "VLLM_HOST_IP=192.168.100.4" in first and "--address=192.168.100.1:6379" in first
    assert "--tensor-parallel-size 4 --distributed-executor-backend ray" in first


def test_dry_run_with_the_space_named_needs_no_gpus(capsys):
    """The second command of the issue: it refused with 'needs 4 GPUs; this host has 0'."""
    code, out, err = run(
        capsys, "search", "--space", "minimax-m3.1-flash-spark4", "--hardware", "spark", "--nodes", "4", "--dry-run"
    )
    assert code == 0, err
    assert len(node_lines(out.split("#1 ")[0])) == 5


def test_dry_run_with_a_cluster_file_shows_each_box_with_its_own_env(capsys, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    code, out, err = run(capsys, "search", "--hardware", "spark", "--nodes", "4", "--cluster", str(cluster), "--dry-run")
    assert code == 0, err
    assert "placeholders" not in out
    first = out.split("#1 ")[0]
    for ip in ("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"):
        assert f"VLLM_HOST_IP={ip}" in first
    assert first.count("NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1") == 5
    assert first.count("NCCL_SOCKET_IFNAME=enp1s0f1np1") == 5


def test_a_real_search_still_needs_the_boxes_or_a_cluster_file(capsys, tmp_path):
    """Placeholder hosts are for showing only: without --dry-run nothing runs on them."""
    from autotune.commands.setup import cluster_for
    from autotune.hardware.profiles import get_profile
    from autotune.models import DeviceIdentity

    device = DeviceIdentity(hostname="h", os="linux", cpu_cores=2, memory_total_gb=8, memory_available_gb=4)
    with pytest.raises(ConfigError, match="needs 4 GPUs; this host has 0"):
        cluster_for(None, 4, "ray", get_profile("spark"), device, None)
    shown = cluster_for(None, 4, "ray", get_profile("spark"), device, None, dry_run=True)
    assert shown is not None and [n.ip for n in shown.nodes][-1] == "192.168.100.4"


def test_plan_prints_the_best_candidates_launch_per_node(capsys, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    code, out, err = run(capsys, "plan", "--hardware", "spark", "--nodes", "4", "--cluster", str(cluster))
    assert code == 0, err
    assert "using minimax-m3.1-flash-spark4" in err
    tail = out.split("launch of the best-predicted candidate")[1]
    assert node_lines(tail) == [
        "# node 0 (head)", "# node 1 (worker)", "# node 2 (worker)", "# node 3 (worker)", "# node 0 (server)"
    ]
    assert "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in tail and "vllm.entrypoints.cli.main serve" in tail

    code, out, _ = run(capsys, "plan", "--hardware", "spark", "--nodes", "4")
    assert code == 0
    assert "hosts are placeholders (192.168.100.1-4" in out


def test_plan_json_carries_the_launch(capsys):
    import json

    code, out, _ = run(capsys, "plan", "--hardware", "spark", "--nodes", "4", "--json")
    assert code == 0
    report = json.loads(out)
    assert [n["role"] for n in report["launch"]["nodes"]] == ["head", "worker", "worker", "worker", "server"]
    assert report["hosts_note"].startswith("hosts are placeholders")


def test_a_cluster_file_of_more_boxes_than_nodes_runs_on_its_first_ones(capsys, tmp_path):
    """--nodes 2 on a file of four boxes: nodes 0 and 1 of the file, the others left alone (a
    llama.cpp study at --nodes 1 on a cluster file of two boxes runs on the first)."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    from autotune.hardware.profiles import get_profile
    from autotune.models import DeviceIdentity
    from autotune.commands.setup import cluster_for

    device = DeviceIdentity(hostname="h", os="linux", cpu_cores=2, memory_total_gb=8, memory_available_gb=4)
    used = cluster_for(cluster, 2, "docker", get_profile("spark"), device, "img")
    assert used is not None and [n.ip for n in used.nodes] == ["10.0.0.1", "10.0.0.2"] and used.image == "img"
    with pytest.raises(ConfigError, match="--nodes 5 but the cluster file .* lists 4 nodes"):
        cluster_for(cluster, 5, "docker", get_profile("spark"), device, "img")


def test_plan_with_a_cluster_file_of_fewer_boxes_is_refused(capsys, tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text("\n".join(CLUSTER.strip().splitlines()[:3]) + "\n")
    code, out, err = run(capsys, "plan", "--hardware", "spark", "--nodes", "4", "--cluster", str(cluster))
    assert code == 2
    assert f"--nodes 4 but the cluster file {cluster} lists 2 nodes" in err


def test_dry_run_shows_what_the_study_launches_first_and_every_launch_only_when_asked(capsys):
    """The main command's dry run printed all 2592 candidates' launches (28,518 lines): now the
    ones a new study launches first, in its order, and --all-candidates for the rest."""
    import re

    def heads(text: str) -> list[str]:
        return [line for line in text.splitlines() if re.match(r"#\d+ ", line)]

    args = ("search", "--hardware", "spark", "--nodes", "4", "--dry-run")
    code, out, err = run(capsys, *args)
    assert code == 0, err
    first = heads(out)
    assert len(first) == 4 and first[0].startswith("#0 (baseline) ")
    assert all(line.split()[1] == "(planner)" for line in first[1:])
    assert "then the sampler picks among the other 2588 that survive pruning; --all-candidates shows every launch" in out
    assert len(out.splitlines()) < 80
    code, out, err = run(capsys, *args, "--try", "kv_cache_dtype=fp8")
    assert code == 0, err
    assert [line.split()[1] for line in heads(out)] == ["(baseline)", "(--try)", "(planner)", "(planner)", "(planner)"]
    code, out, err = run(capsys, *args, "--all-candidates")
    assert code == 0, err
    assert len(heads(out)) == 2592
