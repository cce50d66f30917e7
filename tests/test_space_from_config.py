"""`autotune space new`: a validated search space from a model's config.json (issue 18).

The config.json fixtures under tests/data/configs/ hold the published architecture fields of four
real models; the parameter counts are checked against the numbers their publishers state."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.space.candidates import load_space
from autotune.commands.space_new import architecture, checkpoint_format, count_params, new_space, read_config

CONFIGS = Path(__file__).resolve().parent / "data" / "configs"
GIB = 1024**3


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def model_dir(tmp_path: Path, name: str) -> Path:
    """A model directory holding only the fixture's config.json, as after `hf download ... config.json`."""
    target = tmp_path / name
    target.mkdir()
    shutil.copy(CONFIGS / name / "config.json", target / "config.json")
    return target


# ------------------------------------------------------------------ facts from config.json


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        # publishers' counts: Qwen 30.5B / 3.3B (its 3.3B also counts the input embedding, 0.3B),
        # Meta 70.6B, OpenAI 116.8B / 5.1B, DeepSeek 671B / 37B
        ("Qwen3-30B-A3B", 30.5, 3.3),
        ("Llama-3.3-70B-Instruct", 70.6, 70.6),
        ("gpt-oss-120b", 116.8, 5.1),
        ("DeepSeek-V3", 671.0, 37.0),
    ],
)
def test_parameter_counts_match_the_published_ones(name, total_b, active_b):
    cfg, _ = read_config(str(CONFIGS / name))
    params = count_params(architecture(cfg))
    assert params.total / 1e9 == pytest.approx(total_b, rel=0.01)
    assert params.active / 1e9 == pytest.approx(active_b, rel=0.1)


def test_mxfp4_checkpoint_size_matches_the_published_one():
    """gpt-oss-120b: MXFP4 experts, 16-bit attention, router and embeddings = 60.8 GiB on disk."""
    cfg, _ = read_config(str(CONFIGS / "gpt-oss-120b"))
    params = count_params(architecture(cfg))
    ckpt = checkpoint_format(cfg)
    assert ckpt.format == "mxfp4" and "attention" not in ckpt.quantized
    assert params.total * ckpt.weight_bits(params) / 8 / GIB == pytest.approx(60.8, rel=0.01)


def test_architecture_reads_moe_mla_sliding_and_mtp():
    deepseek = architecture(read_config(str(CONFIGS / "DeepSeek-V3"))[0])
    assert (deepseek.moe_layers, deepseek.n_experts, deepseek.kv_lora_rank, deepseek.mtp_layers) == (58, 256, 512, 1)
    oss = architecture(read_config(str(CONFIGS / "gpt-oss-120b"))[0])
    assert (oss.sliding_layers, oss.sliding_window, oss.attention_sinks) == (18, 128, True)
    qwen = architecture(read_config(str(CONFIGS / "Qwen3-30B-A3B") + "/config.json")[0])
    assert (qwen.moe_layers, qwen.experts_per_tok, qwen.n_kv_heads, qwen.head_dim) == (48, 8, 4, 128)


# ------------------------------------------------------------------ the space


def test_a_moe_bf16_model_on_four_sparks(tmp_path):
    made = new_space(str(model_dir(tmp_path, "Qwen3-30B-A3B")), "spark", 4)
    space = made.space
    assert (space.engine, space.hardware, space.nodes, space.launcher) == ("vllm", "spark", 4, "ray")
    assert space.fixed["tensor_parallel_size"] == 4
    assert space.fixed["gpu_memory_utilization"] == 0.8
    assert space.fixed["max_model_len"] == 40960  # the model's own context fits
    assert space.fixed["spec_method"] == "ngram"
    knobs = {k.name: k for k in space.knobs}
    assert knobs["quantization"].values == [None, "fp8"]  # a 16-bit checkpoint: online fp8 is an option
    assert knobs["kv_cache_dtype"].values == [None, "fp8"]
    assert knobs["attention_backend"].values == [None, "TRITON_ATTN", "FLASHINFER"]
    assert all(k.default == k.values[0] for k in space.knobs)
    assert "moe_backend" not in space.fixed  # bf16 experts: vLLM's own choice
    assert space.env == {"VLLM_ENGINE_READY_TIMEOUT_S": "1800", "NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"}
    assert space.model.params_total_b == pytest.approx(30.5, rel=0.01)
    assert space.model.n_kv_heads == 4 and space.model.path == str(tmp_path / "Qwen3-30B-A3B")


def test_memory_fit_quantizes_a_dense_70b_that_does_not_fit_one_spark(tmp_path):
    made = new_space(str(model_dir(tmp_path, "Llama-3.3-70B-Instruct")), "spark", 1)
    one = made.space
    assert one.fixed["quantization"] == "fp8"  # 141 GB of bf16 weights > one Spark
    assert "# - quantization fp8 (fixed)" in made.text and "quantization null/fp8" not in made.text
    assert "quantization" not in {k.name for k in one.knobs}
    assert one.fixed["max_model_len"] < 131072  # the full context does not fit beside the weights
    four = new_space(str(tmp_path / "Llama-3.3-70B-Instruct"), "spark", 4, name="llama-tp4").space
    assert "quantization" not in four.fixed and four.fixed["max_model_len"] == 131072
    assert four.name == "llama-tp4"


def test_an_mxfp4_model_with_attention_sinks(tmp_path):
    space = new_space(str(model_dir(tmp_path, "gpt-oss-120b")), "spark", 1).space
    assert space.fixed["attention_backend"] == "TRITON_ATTN"
    assert space.fixed["moe_backend"] == "marlin"
    assert "quantization" not in space.fixed and "quantization" not in {k.name for k in space.knobs}
    assert space.model.weight_bits == pytest.approx(4.46, abs=0.02)
    assert space.model.kv_layers == 18


def test_an_mla_model_with_mtp_layers(tmp_path):
    space = new_space(str(model_dir(tmp_path, "DeepSeek-V3")), "h200", 1).space
    assert space.name == "deepseek-v3-h200x1"
    knobs = {k.name: k for k in space.knobs}
    assert space.fixed["spec_method"] == "mtp" and knobs["draft_k"].values == [0, 1, 2, 3]
    assert "kv_cache_dtype" not in knobs and "attention_backend" not in knobs
    assert space.fixed["tensor_parallel_size"] == 8
    assert "gpu_memory_utilization" not in space.fixed  # not unified memory


def test_hd256_fp8_kv_keeps_flashinfer_out(tmp_path):
    cfg = json.loads((CONFIGS / "Qwen3-30B-A3B" / "config.json").read_text())
    cfg.update({"head_dim": 256, "architectures": ["Qwen3MoeForCausalLM"]})
    target = tmp_path / "hd256"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(cfg))
    space = new_space(str(target), "spark", 1).space
    assert [r.then for r in space.rules] == [{"attention_backend": ["TRITON_ATTN"]}]


# ------------------------------------------------------------------ the command


def test_space_new_writes_a_space_search_accepts(capsys, tmp_path):
    model = model_dir(tmp_path, "Qwen3-30B-A3B")
    out_file = tmp_path / "qwen-spark4.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "spark", "--nodes", "4",
                         "-o", str(out_file))
    assert code == 0, err
    assert out.startswith("space qwen3-30b-a3b-spark4: 108 candidates on 4 x spark")
    assert f"next: autotune plan --space {out_file} --hardware spark --nodes 4" in out
    text = out_file.read_text()
    assert text.startswith("# qwen3-30b-a3b-spark4: written by `autotune space new`")
    assert "# Memory fit on spark: max_model_len 40960" in text
    assert load_space(str(out_file)).name == "qwen3-30b-a3b-spark4"

    code, out, err = run(capsys, "search", "--space", str(out_file), "--dry-run")
    assert code == 0, err
    assert "108 candidates, 108 survive pruning (hardware spark x4)" in out
    assert "--tensor-parallel-size 4 --distributed-executor-backend ray" in out

    code, out, err = run(capsys, "plan", "--space", str(out_file), "--json")
    assert code == 0, err
    assert json.loads(out)["kept"]


def test_space_new_without_output_prints_the_yaml(capsys, tmp_path):
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "gpt-oss-120b")))
    assert code == 0, err
    (tmp_path / "printed.yaml").write_text(out)
    assert load_space(str(tmp_path / "printed.yaml")).fixed["attention_backend"] == "TRITON_ATTN"
    assert err.startswith("space gpt-oss-120b-spark1:")


def test_space_new_never_writes_over_a_file(capsys, tmp_path):
    existing = tmp_path / "mine.yaml"
    existing.write_text("my own edits\n")
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "Qwen3-30B-A3B")), "-o", str(existing))
    assert code == 2
    assert "exists: nothing written" in err
    assert existing.read_text() == "my own edits\n"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "autotune downloads nothing"),
        ("no_config", "holds no config.json"),
        ("not_llm", "config.json has no num_hidden_layers: not the config of a decoder LLM"),
        ("exl3", "quant_method 'exl3': autotune does not know its bits per weight"),
        ("too_big", "DeepSeek-V3 does not fit on 4 x spark even at 4096 tokens"),
        ("heads", "32 attention heads do not split over tensor_parallel_size=3"),
    ],
)
def test_space_new_bad_input_is_one_line_and_exit_2(capsys, tmp_path, setup, message):
    nodes = "4"
    if setup == "missing":
        model = tmp_path / "nowhere"
    elif setup == "no_config":
        model = tmp_path / "empty"
        model.mkdir()
    elif setup == "not_llm":
        model = tmp_path / "vision"
        model.mkdir()
        (model / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 768}))
    elif setup == "exl3":
        model = model_dir(tmp_path, "Qwen3-30B-A3B")
        cfg = json.loads((model / "config.json").read_text())
        cfg["quantization_config"] = {"quant_method": "exl3", "bits": 3.0}
        (model / "config.json").write_text(json.dumps(cfg))
    elif setup == "too_big":
        model = model_dir(tmp_path, "DeepSeek-V3")
    else:
        model, nodes = model_dir(tmp_path, "Qwen3-30B-A3B"), "3"
    out_file = tmp_path / "space.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "spark", "--nodes", nodes,
                         "-o", str(out_file))
    assert code == 2
    assert message in err and err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert not out_file.exists()


def test_space_new_refuses_cpu_hardware(tmp_path):
    with pytest.raises(ConfigError, match="vLLM spaces for GPU hardware"):
        new_space(str(model_dir(tmp_path, "Qwen3-30B-A3B")), "cpu", 1)


def test_space_new_offers_the_capacity_objective(capsys, tmp_path):
    """issue 32: `--objective capacity --ttft-ms 2000 --itl-ms 50` writes a capacity_at_slo space."""
    model = model_dir(tmp_path, "Qwen3-30B-A3B")
    out_file = tmp_path / "qwen-capacity.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "h200", "--objective", "capacity",
                         "--ttft-ms", "2000", "--itl-ms", "50", "-o", str(out_file))
    assert code == 0, err
    space = load_space(str(out_file))
    assert space.objective.metric == "capacity_at_slo" and space.objective.slo is not None
    assert (space.objective.slo.ttft_ms, space.objective.slo.itl_ms, space.objective.slo.attainment) == (2000, 50, 0.95)
    assert "# Objective capacity_at_slo: the most concurrent streams with TTFT <= 2000 ms, ITL <= 50 ms" in out_file.read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--objective", "capacity", "--ttft-ms", "2000"], "--objective capacity needs --itl-ms"),
        (["--ttft-ms", "2000"], "--ttft-ms set the SLO of --objective capacity, not of --objective decode"),
        (["--objective", "capacity", "--ttft-ms", "2000", "--itl-ms", "50", "--attainment", "1.5"],
         "--objective capacity: attainment"),
    ],
)
def test_space_new_refuses_an_incomplete_slo(capsys, tmp_path, args, message):
    out_file = tmp_path / "never.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "Qwen3-30B-A3B")), *args,
                         "-o", str(out_file))
    assert code == 2 and message in err, err
    assert not out_file.exists()


def test_space_new_offers_the_energy_objectives_and_warns_where_this_host_has_no_gpu_energy(capsys, tmp_path,
                                                                                          monkeypatch):
    """issue 33: `--objective energy` writes tokens_per_joule of --energy-workload, `--objective
    speed-energy` the weighted form; on a host without GPU energy (this one: no NVML) the space is
    still written, with a warning, since a space is often for another host."""
    from fakes import nvml as fake_nvml

    fake_nvml.no_nvml(monkeypatch)
    model = model_dir(tmp_path, "Qwen3-30B-A3B")
    energy_file = tmp_path / "qwen-energy.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "h200", "--objective", "energy",
                         "--energy-workload", "c8", "-o", str(energy_file))
    assert code == 0, err
    space = load_space(str(energy_file))
    assert (space.objective.metric, space.objective.energy_of) == ("tokens_per_joule", "c8")
    assert 8 in space.workload.concurrency  # the wave the objective reads is measured
    assert "warning: objective tokens_per_joule needs the GPUs' energy" in err and "written all the same" in err
    assert "# Objective tokens_per_joule: output tokens per GPU joule" in energy_file.read_text()
    mixed_file = tmp_path / "qwen-mixed.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "h200", "--objective",
                         "speed-energy", "--energy-weight", "0.25", "-o", str(mixed_file))
    assert code == 0, err
    mixed = load_space(str(mixed_file)).objective
    assert mixed.metric == "speed_energy" and mixed.unit == "(tok/s)^0.75(tok/J)^0.25"
    assert [(t.quantity.value, t.workload) for t in mixed.terms] == [("tokens_per_s", "prose"),
                                                                    ("tokens_per_joule", "prose")]
    assert "warning: objective speed_energy" in err


def test_space_new_with_gpu_energy_here_says_nothing_more(capsys, tmp_path, monkeypatch):
    from fakes import nvml as fake_nvml
    from fakes.nvml import FakeGpu

    fake_nvml.install(monkeypatch, [FakeGpu()])
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "Qwen3-30B-A3B")), "--hardware",
                         "h200", "--objective", "energy", "-o", str(tmp_path / "e.yaml"))
    assert code == 0 and "warning" not in err, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--objective", "speed-energy", "--energy-weight", "1"], "--energy-weight 1: the tok/J term's weight"),
        (["--objective", "energy", "--energy-weight", "0.5"], "--energy-weight is the weight of --objective speed-energy"),
        (["--energy-workload", "prose"], "--energy-workload is used by --objective energy and speed-energy, not decode"),
        (["--objective", "energy", "--energy-workload", "prefill"], "--objective energy (--energy-workload): "),
        (["--objective", "energy", "--ttft-ms", "100"], "--ttft-ms set the SLO of --objective capacity, not of "
                                                          "--objective energy"),
    ],
)
def test_space_new_refuses_bad_energy_flags(capsys, tmp_path, args, message):
    out_file = tmp_path / "never.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "Qwen3-30B-A3B")), "--hardware",
                         "h200", *args, "-o", str(out_file))
    assert code == 2 and message in " ".join(err.split()), err
    assert not out_file.exists()
