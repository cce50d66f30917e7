"""Hardware profiles that match the host (issue 34, item 4): `--hardware auto` wherever a profile is
taken, a detected profile's GPU count and memory, a tensor parallel size beyond the host's GPUs
refused before anything runs, and the plan's usable memory being what the KV pool comes from.

Both hosts are stand-ins (tests/fakes/gpu_host.py: a fake `torch` in the device probe's child
process, answering as one H200 does, or failing to import as on a host without a GPU stack), so
the tests say the same on any machine."""

from __future__ import annotations

import json
from pathlib import Path

import corpus
import pytest

from autotune.cli import main
from autotune.hardware.device import detect
from autotune.hardware.profiles import GIB_IN_GB, resolve_hardware
from autotune.space.candidates import load_space
from tests.fakes.gpu_host import H200_TOTAL_BYTES, cpu_host, h200_host

H200_GB = round(H200_TOTAL_BYTES / 1e9, 2)  # 150.11 GB = 139.8 GiB


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def model_dir(tmp_path: Path, name: str = "qwen3-30b-a3b") -> Path:
    return corpus.model_dir(tmp_path, name)


@pytest.fixture
def one_h200(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h200_host(tmp_path, monkeypatch, count=1)


@pytest.fixture
def no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_host(tmp_path, monkeypatch)


# ---------------------------------------------------------------- the stand-in and the profile


def test_the_stand_in_host_is_one_h200(one_h200):
    (gpu,) = detect().gpus
    assert (gpu.name, gpu.compute_capability, gpu.unified_memory) == ("NVIDIA H200", "sm_90", False)
    assert gpu.total_memory_gb == pytest.approx(139.8, abs=0.01)


def test_a_named_profile_that_is_this_host_takes_its_gpus_and_memory(one_h200):
    profile = resolve_hardware("h200", detect())
    assert profile.gpus_per_node == 1
    assert profile.memory_gb_per_gpu == pytest.approx(139.8 * GIB_IN_GB, abs=0.01)
    assert profile.detected_on is not None


def test_a_named_profile_elsewhere_stays_the_board(no_gpu):
    profile = resolve_hardware("h200", detect())
    assert (profile.gpus_per_node, profile.memory_gb_per_gpu, profile.detected_on) == (8, 141.0, None)


# ---------------------------------------------------------------- space new


def test_space_new_h200_on_a_one_gpu_h200_writes_tp_1_and_says_so(capsys, tmp_path, one_h200):
    out_file = tmp_path / "qwen-h200.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path)), "--hardware", "h200",
                         "--nodes", "1", "-o", str(out_file))
    assert code == 0, err
    assert load_space(str(out_file)).fixed["tensor_parallel_size"] == 1  # before: 8, which cannot launch
    assert f"h200: 1 GPU per node, {H200_GB:.1f} GB (139.8 GiB) each, detected on this host" in out
    assert "# Hardware: h200: 1 GPU per node" in out_file.read_text()


def test_space_new_auto_takes_the_host(capsys, tmp_path, one_h200):
    out_file = tmp_path / "qwen-auto.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path)), "--hardware", "auto",
                         "-o", str(out_file))
    assert code == 0, err  # before: "unknown hardware profile 'auto'; known: ..., or 'auto'"
    space = load_space(str(out_file))
    assert space.hardware == "h200" and space.fixed["tensor_parallel_size"] == 1
    assert "next: autotune plan --space" in out and "--hardware h200 --nodes 1" in out


def test_space_new_auto_on_a_cpu_host_says_what_to_do(capsys, tmp_path, no_gpu):
    code, _, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path)), "--hardware", "auto")
    assert code == 2
    assert "unknown hardware profile" not in err
    assert "space new writes vLLM spaces for GPU hardware; for cpu" in err
    assert len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------- auto wherever a profile is taken


def test_auto_on_a_cpu_host_works_for_plan_search_and_export(capsys, tmp_path, no_gpu):
    code, out, err = run(capsys, "plan", "--space", "llamacpp-gemma3-270m", "--hardware", "auto", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["hardware"] == "cpu" and report["detected_on"]
    code, out, err = run(capsys, "search", "--space", "llamacpp-gemma3-270m", "--hardware", "auto", "--dry-run")
    assert code == 0, err
    assert "cpu: no GPU" in out and "detected on this host" in out
    code, out, err = run(capsys, "export", "--predicted", "--space", "llamacpp-gemma3-270m", "--hardware", "auto")
    assert code == 0, err
    assert not (tmp_path / "runs.db").exists()


# ---------------------------------------------------------------- a TP beyond the host's GPUs


@pytest.mark.parametrize("command", [["search", "--dry-run"], ["plan"]])
def test_tp_beyond_the_host_gpus_is_refused_with_the_numbers(capsys, tmp_path, one_h200, command):
    space = tmp_path / "tp8.yaml"
    space.write_text(
        "name: tp8\nengine: vllm\nhardware: h200\n"
        "model: {name: m, path: m, params_total_b: 8.0, weight_bits: 16, n_layers: 32, hidden_size: 4096,\n"
        "        n_heads: 32, n_kv_heads: 8, head_dim: 128}\n"
        "fixed: {tensor_parallel_size: 8, max_model_len: 4096}\n"
        "knobs: [{name: kv_cache_dtype, values: [auto, fp8], default: auto}]\n"
    )
    code, _, err = run(capsys, *command, "--space", str(space), "--hardware", "h200")
    assert code == 2  # before: the dry run rendered TP 8 for a one-GPU host, and plan kept it
    line = err.strip()
    assert len(line.splitlines()) == 1
    assert "tensor_parallel_size=8" in line and "1 GPU" in line and "detected on this host" in line
    assert not (tmp_path / "runs.db").exists()


# ---------------------------------------------------------------- usable = what the KV pool comes from


def test_plan_usable_is_what_the_kv_pool_is_computed_from(capsys, one_h200):
    code, out, err = run(capsys, "plan", "--space", "vllm-gemma3-270m", "--hardware", "auto")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "usable" in line and "candidate" in line)
    first_row = next(line for line in out.splitlines() if line.startswith("│") and "1x1" in line)
    column = [c.strip() for c in header.split("┃")].index("usable")
    # vllm-gemma3-270m fixes gpu_memory_utilization 0.5: vLLM carves its KV pool out of 0.5 x 150.1 GB;
    # before: the column showed 150.1, the whole GPU
    assert first_row.split("│")[column].strip() == f"{0.5 * H200_GB:.1f}"
    assert f"h200: 1 GPU per node, {H200_GB:.1f} GB (139.8 GiB) each, detected on this host" in out

    code, out, err = run(capsys, "plan", "--space", "vllm-gemma3-270m", "--hardware", "auto", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["hardware"] == "h200" and report["gpus_per_node"] == 1
    assert report["memory_gb_per_gpu"] == pytest.approx(H200_GB, abs=0.01)
    assert report["kept"][0]["engine_budget_gb"] == pytest.approx(0.5 * H200_GB, abs=0.01)


def test_the_search_forecast_says_what_a_node_is(one_h200):
    from autotune.hardware.profiles import describe
    from autotune.output.progress import forecast_text
    from autotune.study.forecast import RunForecast

    line = describe(resolve_hardware("auto", detect()))
    text = forecast_text(RunForecast(study="s", candidates_total=4, candidates_left=4, measured=0, trials=4,
                                     confirm_rounds=0, trial_s=60.0, basis="guess", hardware=line))
    assert text.endswith(f"hardware h200: 1 GPU per node, {H200_GB:.1f} GB (139.8 GiB) each, detected on this host")
