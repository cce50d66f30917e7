"""`autotune space new`: a validated search space from a model's config.json (issues 18, 49).

The configs are the corpus's (tests/corpus.py): real config.json files of published models."""

from __future__ import annotations

import json

import pytest

from autotune.cli import main
from autotune.errors import ConfigError
from autotune.checkpoint.config import load_model_config
from autotune.checkpoint.params import count_params
from autotune.space.candidates import load_space
from autotune.commands.space_new import checkpoint_format, new_space
from corpus import CORPUS, model_dir

GIB = 1024**3


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ------------------------------------------------------------------ facts from config.json


def test_mxfp4_checkpoint_size_matches_the_published_one():
    """gpt-oss-120b: MXFP4 experts, 16-bit attention, router and embeddings = 60.8 GiB on disk."""
    config = load_model_config(CORPUS / "gpt-oss-120b")
    params = count_params(config)
    ckpt = checkpoint_format(config.raw)
    assert ckpt.format == "mxfp4" and "attention" not in ckpt.quantized
    assert params.total * ckpt.weight_bits(params) / 8 / GIB == pytest.approx(60.8, rel=0.01)


def test_architecture_reads_moe_mla_sliding_and_mtp():
    deepseek = load_model_config(CORPUS / "deepseek-v3")
    assert (deepseek.moe_layers, deepseek.n_experts, deepseek.kv_lora_rank, deepseek.mtp_layers) == (58, 256, 512, 1)
    oss = load_model_config(CORPUS / "gpt-oss-120b")
    assert (oss.sliding_layers, oss.sliding_window, oss.attention_sinks) == (18, 128, True)
    qwen = load_model_config(CORPUS / "qwen3-30b-a3b" / "config.json")
    assert (qwen.moe_layers, qwen.experts_per_tok, qwen.n_kv_heads, qwen.head_dim) == (48, 8, 4, 128)


# ------------------------------------------------------------------ the space


def test_a_moe_bf16_model_on_four_sparks(tmp_path):
    made = new_space(str(model_dir(tmp_path, "qwen3-30b-a3b")), "spark", 4)
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
    assert space.model.n_kv_heads == 4 and space.model.path == str(tmp_path / "qwen3-30b-a3b")


def test_memory_fit_quantizes_a_dense_70b_that_does_not_fit_one_spark(tmp_path):
    made = new_space(str(model_dir(tmp_path, "llama-3.1-70b-instruct")), "spark", 1)
    one = made.space
    assert one.fixed["quantization"] == "fp8"  # 141 GB of bf16 weights > one Spark
    assert "# - quantization fp8 (fixed)" in made.text and "quantization null/fp8" not in made.text
    assert "quantization" not in {k.name for k in one.knobs}
    assert one.fixed["max_model_len"] < 131072  # the full context does not fit beside the weights
    four = new_space(str(tmp_path / "llama-3.1-70b-instruct"), "spark", 4, name="llama-tp4").space
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
    space = new_space(str(model_dir(tmp_path, "deepseek-v3")), "h200", 1).space
    assert space.name == "deepseek-v3-h200x1"
    knobs = {k.name: k for k in space.knobs}
    assert space.fixed["spec_method"] == "mtp" and knobs["draft_k"].values == [0, 1, 2, 3]
    assert "kv_cache_dtype" not in knobs and "attention_backend" not in knobs
    assert space.fixed["tensor_parallel_size"] == 8
    assert "gpu_memory_utilization" not in space.fixed  # not unified memory


def test_hd256_fp8_kv_keeps_flashinfer_out(tmp_path):
    cfg = json.loads((CORPUS / "qwen3-30b-a3b" / "config.json").read_text())
    cfg.update({"head_dim": 256, "architectures": ["Qwen3MoeForCausalLM"]})
    target = tmp_path / "hd256"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(cfg))
    space = new_space(str(target), "spark", 1).space
    assert [r.then for r in space.rules] == [{"attention_backend": ["TRITON_ATTN"]}]


# ------------------------------------------------------------------ the command


def test_space_new_writes_a_space_search_accepts(capsys, tmp_path):
    model = model_dir(tmp_path, "qwen3-30b-a3b")
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
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "qwen3-30b-a3b")), "-o", str(existing))
    assert code == 2
    assert "exists: nothing written" in err
    assert existing.read_text() == "my own edits\n"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "autotune downloads nothing"),
        ("no_config", "holds no config.json"),
        ("not_llm", "not the config of a decoder LLM autotune can read"),
        ("exl3", "quant_method 'exl3': autotune does not know its bits per weight"),
        ("too_big", "deepseek-v3 does not fit on 4 x spark even at 4096 tokens"),
        ("heads", "32 attention heads do not split over tensor_parallel_size=3"),
        ("heads", "--layout 1x3 (tensor_parallel_size 1 x pipeline_parallel_size 3)"),
        ("layout", "--layout 3x2 uses 6 GPUs; --nodes 4 x spark has 4"),
    ],
)
def test_space_new_bad_input_is_one_line_and_exit_2(capsys, tmp_path, setup, message):
    nodes, extra = "4", []
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
        model = model_dir(tmp_path, "qwen3-30b-a3b")
        cfg = json.loads((model / "config.json").read_text())
        cfg["quantization_config"] = {"quant_method": "exl3", "bits": 3.0}
        (model / "config.json").write_text(json.dumps(cfg))
    elif setup == "too_big":
        model = model_dir(tmp_path, "deepseek-v3")
    elif setup == "layout":
        model, extra = model_dir(tmp_path, "qwen3-30b-a3b"), ["--layout", "3x2"]
    else:
        model, nodes = model_dir(tmp_path, "qwen3-30b-a3b"), "3"
    out_file = tmp_path / "space.yaml"
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "spark", "--nodes", nodes,
                         "-o", str(out_file), *extra)
    assert code == 2
    assert message in err and err.startswith("error:") and len(err.strip().splitlines()) == 1
    assert not out_file.exists()


def test_space_new_refuses_cpu_hardware(tmp_path):
    with pytest.raises(ConfigError, match="vLLM spaces for GPU hardware"):
        new_space(str(model_dir(tmp_path, "qwen3-30b-a3b")), "cpu", 1)


def test_space_new_offers_the_capacity_objective(capsys, tmp_path):
    """issue 32: `--objective capacity --ttft-ms 2000 --itl-ms 50` writes a capacity_at_slo space."""
    model = model_dir(tmp_path, "qwen3-30b-a3b")
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
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "qwen3-30b-a3b")), *args,
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
    model = model_dir(tmp_path, "qwen3-30b-a3b")
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
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "qwen3-30b-a3b")), "--hardware",
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
    code, out, err = run(capsys, "space", "new", "--model", str(model_dir(tmp_path, "qwen3-30b-a3b")), "--hardware",
                         "h200", *args, "-o", str(out_file))
    assert code == 2 and message in " ".join(err.split()), err
    assert not out_file.exists()


# ------------------------------------------------------------------ issue 49: every model a Spark owner brings


def test_gemma3_27b_gets_a_space_with_the_defaults_transformers_fills_named(tmp_path):
    """Gemma 3's text_config leaves vocab_size, the sliding-window pattern and tied embeddings to
    transformers' Gemma3TextConfig; the space says so, and counts the vision tower apart."""
    made = new_space(str(model_dir(tmp_path, "gemma-3-27b-it")), "spark", 1)
    assert made.space.model.vocab_size == 262208
    assert made.space.model.kv_layers == 10  # 5 local : 1 global over 62 layers
    assert "vocab_size: transformers' Gemma3TextConfig default 262208" in made.text
    assert made.space.model.params_vision_b == pytest.approx(0.417, rel=0.02)
    assert made.space.model.params_total_b == pytest.approx(27.43, rel=0.01)


def test_llama4_scout_counts_its_shared_experts(tmp_path):
    """Llama 4 Scout: a shared expert in every MoE layer beside the 16 routed ones (109B / 17B)."""
    made = new_space(str(model_dir(tmp_path, "llama-4-scout-17b-16e-instruct")), "spark", 4)
    assert made.space.model.params_total_b == pytest.approx(109, rel=0.02)
    assert made.space.model.params_active_b == pytest.approx(17, rel=0.1)


def test_phi4_on_four_sparks_offers_the_layouts_that_divide(capsys, tmp_path):
    """10 KV heads do not split over TP 4: the message offers TP 2 x PP 2 and 2 boxes, and
    --layout 2x2 writes that space."""
    model = model_dir(tmp_path, "phi-4")
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "spark", "--nodes", "4")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--layout 2x2 (tensor_parallel_size 2 x pipeline_parallel_size 2)" in err
    assert "--nodes 2" in err
    space = new_space(str(model), "spark", 4, layout="2x2").space
    assert (space.fixed["tensor_parallel_size"], space.fixed["pipeline_parallel_size"]) == (2, 2)
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "spark", "--nodes", "4",
                         "--layout", "2x2", "-o", str(tmp_path / "phi4.yaml"))
    assert code == 0, err
    code, out, err = run(capsys, "search", "--space", str(tmp_path / "phi4.yaml"), "--dry-run")
    assert code == 0, err
    assert "--tensor-parallel-size 2 --pipeline-parallel-size 2" in out


def test_a_multi_gpu_profile_says_how_to_match_the_gpus_you_have(capsys, tmp_path):
    """The h100 profile is an 8-GPU node: the space runs TP 8, and says that --hardware auto on the
    host itself (or --layout) gives what one H100 runs."""
    model = model_dir(tmp_path, "qwen3-30b-a3b")
    code, out, err = run(capsys, "space", "new", "--model", str(model), "--hardware", "h100", "-o",
                         str(tmp_path / "h100.yaml"))
    assert code == 0, err
    assert "8 GPUs per node" in err and "--hardware auto" in err and "--layout 1x1" in err
    one = new_space(str(model), "h100", 1, layout="1x1").space
    assert one.fixed["tensor_parallel_size"] == 1


@pytest.mark.parametrize(
    ("name", "nodes", "total_b"),
    [("nemotron-h-56b-base-8k", 1, 56.3), ("nvidia-nemotron-3-nano-30b-a3b-bf16", 1, 31.6),
     ("llama-3_3-nemotron-super-49b-v1", 1, 49.9), ("qwen3.5-27b", 1, 27.4)],
)
def test_hybrid_and_pruned_layers_are_counted_as_they_are(tmp_path, name, nodes, total_b):
    """Mamba-2, MLP-only, linear-attention and pruned layers are not dense transformer layers."""
    made = new_space(str(model_dir(tmp_path, name)), "spark", nodes)
    assert made.space.model.params_total_b == pytest.approx(total_b, rel=0.02)


def test_the_header_says_how_each_number_was_counted(tmp_path):
    text = new_space(str(model_dir(tmp_path, "deepseek-v3")), "h200", 1).text
    assert "# config.json read by transformers' DeepseekV3Config" in text
    assert "counted on the meta device" in text
    assert "MTP layers: 11." in text and "not in the total" in text
