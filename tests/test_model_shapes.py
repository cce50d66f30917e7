"""Dummy-weight test bed on the CPU: shape directories, the generated tokenizer, dummy spaces,
fixed-length decoding requests, the dummy recipe's accuracy line, and the planner check's fitting.

The HTTP side runs through a scripted local server (tests/fakes/scripted_http.py: it answers with as many tokens
as the request asks for, fewer when it has no ignore_eos) -- no vLLM can run here.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from autotune.checkpoint import shapes as ms
from autotune.checkpoint.config import load_model_config
from autotune.checkpoint.params import count_params
from autotune.planner import check as pc
from autotune.bench import throughput
from autotune.bench.client import OpenAIClient
from autotune.engines import vllm as V
from autotune.engines.vllm import VllmEngine
from autotune.errors import ConfigError
from autotune.checkpoint.files import resolve_model
from autotune.models import LaunchSpec, Measurement, NodeLaunch, TrialResult, Workload
from autotune.output.recipe import recipe_from_trial
from autotune.space.candidates import baseline, load_space
from corpus import CORPUS
from fakes.scripted_http import Reply

ROOT = Path(__file__).resolve().parents[1]
SHAPES = ["qwen3-30b-a3b", "gpt-oss-20b", "minimax-m2-12l", "llama3.1-8b", "llama3.1-70b-40l"]
SPACES = {
    "llama3.1-8b": str(ROOT / "benchmarks/spaces/vllm-llama3.1-8b-dense.yaml"),
    "llama3.1-70b-40l": str(ROOT / "benchmarks/spaces/vllm-llama3.1-70b-40l-dense.yaml"),
    "qwen3-30b-a3b": "vllm-qwen3-30b-a3b-dummy",
    "gpt-oss-20b": "vllm-gpt-oss-20b-dummy",
    "minimax-m2-12l": "vllm-minimax-m2-12l-dummy",
}
HELP = (ROOT / "tests" / "logs" / "vllm_serve_help_all.txt").read_text()


def shape_dir(name: str) -> Path:
    return ROOT / "model_shapes" / name


# ---------------------------------------------------------------- shape directories


@pytest.mark.parametrize("name", SHAPES)
def test_shape_dir_loads_and_its_counts_match_shape_yaml_and_the_space(name):
    d = shape_dir(name)
    assert ms.is_shape_dir(d)
    info = ms.shape_info(d)
    cfg = ms.read_config(d)
    params = count_params(load_model_config(d))  # shape.yaml's counts leave norms and biases out
    assert params.total / 1e9 == pytest.approx(info.params_total_b, rel=5e-4)
    assert params.active / 1e9 == pytest.approx(info.params_active_b, rel=5e-4)
    # transformers < 5 marks a real hub config; without it transformers 5 warns "incorrect regex"
    assert cfg["transformers_version"].startswith("4.")
    space = load_space(SPACES[name])
    assert space.model.params_total_b == info.params_total_b
    assert space.model.params_active_b == info.params_active_b
    assert space.model.n_layers == cfg["num_hidden_layers"]
    assert space.model.n_kv_heads == cfg["num_key_value_heads"]
    assert space.model.head_dim == cfg["head_dim"]


@pytest.mark.parametrize(("name", "published"), [("qwen3-30b-a3b", "qwen3-30b-a3b"), ("gpt-oss-20b", "gpt-oss-20b"),
                                                 ("minimax-m2-12l", "minimax-m2"),
                                                 ("llama3.1-70b-40l", "llama-3.1-70b-instruct")])
def test_a_shape_keeps_every_layer_of_the_published_model(name, published):
    """A shape cut to fewer layers keeps each layer's full width: its parameters per layer are the
    published config's (tests/corpus.py), embedding and LM head aside."""
    shape, full = load_model_config(shape_dir(name)), load_model_config(CORPUS / published)
    per_layer = [(c.total - c.embedding - c.lm_head) / config.n_layers
                 for config in (shape, full) for c in [count_params(config)]]
    assert per_layer[0] == pytest.approx(per_layer[1], rel=1e-3)


# ---------------------------------------------------------------- generated tokenizer


@pytest.fixture(scope="module")
def materialized(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return {name: ms.materialize(shape_dir(name), cache) for name in SHAPES}


@pytest.mark.parametrize("name", SHAPES)
def test_generated_tokenizer_has_the_configs_vocab_and_special_ids(materialized, name):
    d = materialized[name]
    cfg = json.loads((d / "config.json").read_text())
    assert cfg == ms.read_config(shape_dir(name))
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) == cfg["vocab_size"]
    vocab = tok.get_vocab(with_added_tokens=True)
    assert sorted(vocab.values()) == list(range(cfg["vocab_size"]))  # every id, once
    tcfg = json.loads((d / "tokenizer_config.json").read_text())
    eos = cfg["eos_token_id"]
    assert vocab[tcfg["eos_token"]] == eos
    assert "{{ m['content'] }}" in tcfg["chat_template"]
    # every id a random model can sample decodes to text (specials are skipped)
    for i in (0, 255, 300, 4000, 5000, cfg["vocab_size"] - 1):
        assert tok.decode([i]) != "" or i == eos
    assert tok.decode([cfg["vocab_size"] - 1]) == f" <{cfg['vocab_size'] - 1}>"


def test_bench_prompts_tokenize_to_words_and_round_trip(materialized):
    tok = Tokenizer.from_file(str(materialized["qwen3-30b-a3b"] / "tokenizer.json"))
    text = throughput.load_prompts("prose")[0].prompt
    ids = tok.encode(text).ids
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode()) / 3  # merges learned from the bench's own text, not bytes


def test_materialize_is_deterministic_and_reuses_its_cache(tmp_path, materialized):
    again = ms.materialize(shape_dir("minimax-m2-12l"), tmp_path)
    first = materialized["minimax-m2-12l"]
    assert again.name == first.name  # same config -> same key
    assert (again / "tokenizer.json").read_bytes() == (first / "tokenizer.json").read_bytes()
    stamp = (again / "tokenizer.json").stat().st_mtime_ns
    assert ms.materialize(shape_dir("minimax-m2-12l"), tmp_path) == again
    assert (again / "tokenizer.json").stat().st_mtime_ns == stamp


def test_resolve_model_turns_a_shape_dir_into_a_servable_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path))
    space = load_space("vllm-qwen3-30b-a3b-dummy")
    model = resolve_model(space.model, str(shape_dir("qwen3-30b-a3b")))
    path = Path(model.path)
    assert path.parent == tmp_path / "model-shapes" and (path / "tokenizer.json").is_file()


def test_a_shipped_shape_path_resolves_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    space = load_space("vllm-minimax-m2-12l-dummy")  # model.path: model_shapes/minimax-m2-12l
    assert (Path(resolve_model(space.model).path) / "tokenizer.json").is_file()


def test_roles_sharing_one_id_share_one_special_token():
    assert ms.special_ids({"eos_token_id": [7, 8], "pad_token_id": 7, "bos_token_id": 3}) == {"<|eos|>": 7, "<|bos|>": 3}
    tok = ms.build_tokenizer(1000, ms.special_ids({"eos_token_id": 7, "pad_token_id": 7}))
    assert tok.get_vocab_size(with_added_tokens=True) == 1000


def test_special_ids_outside_the_vocabulary_are_refused():
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        ms.build_tokenizer(1000, {"<|eos|>": 1000})


# ---------------------------------------------------------------- dummy spaces


@pytest.mark.parametrize("space_name", sorted(SPACES.values()))
def test_dummy_spaces_validate_and_render_load_format_dummy(space_name, monkeypatch):
    space = load_space(space_name)
    engine = VllmEngine(python="python3")
    engine.validate_space(space)
    assert ms.dummy_weights(space)
    assert space.gates.needle is None and space.gates.qeval is None
    assert space.workload.fixed_length and space.workload.decode_context_tokens
    assert "draft_k" not in {k.name for k in space.knobs}
    argv = engine.render(baseline(space), space.model, port=8000).server.argv
    assert argv[argv.index("--load-format") + 1] == "dummy"
    # every flag of every value exists in vLLM 0.26.0 (its `serve --help=all`, tests/logs)
    monkeypatch.setattr(V, "supported_flags", lambda python: V.parse_help_options(HELP))
    V.check_space_flags(space, "python3")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gates": {"needle": {}, "qeval": None}}, "cannot pass accuracy gates"),
        ({"workload": {"fixed_length": False}}, "fixed_length: true"),
        ({"knobs": [{"name": "draft_k", "values": [0, 4], "default": 0}], "fixed": {"spec_method": "ngram"}}, "leave draft_k out"),
        ({"fixed": {}, "knobs": [{"name": "load_format", "values": ["auto", "dummy"], "default": "auto"}]}, "in `fixed`"),
    ],
)
def test_dummy_space_rules_refuse_what_random_weights_cannot_measure(change, message):
    data = load_space("vllm-minimax-m2-12l-dummy").model_dump()
    for key, value in change.items():
        if key == "knobs":
            data["knobs"] = data["knobs"] + value
        elif key == "fixed":
            data["fixed"] = {**data["fixed"], **value} if value else {k: v for k, v in data["fixed"].items() if k != "load_format"}
        elif key == "workload":
            data["workload"] = {**data["workload"], **value}
        else:
            data[key] = value
    space = type(load_space("vllm-minimax-m2-12l-dummy")).model_validate(data)
    with pytest.raises(ConfigError, match=message):
        VllmEngine(python="python3").validate_space(space)


# ---------------------------------------------------------------- fixed-length requests


class Engine:
    """Scripted OpenAI stream: n tokens, n = max_tokens when ignore_eos is set, else `natural`."""

    def __init__(self, natural: int) -> None:
        self.natural = natural
        self.bodies: list[dict] = []

    def handler(self, path: str, body: dict) -> Reply:
        self.bodies.append(body)
        n = body["max_tokens"] if body.get("ignore_eos") else min(self.natural, body["max_tokens"])
        events = [{"choices": [{"delta": {"content": f" t{i}"}, "finish_reason": None}]} for i in range(n)]
        events.append({"choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": n}})
        text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return Reply(200, text.encode())


class Ticks:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 0.001
        return self.t


@pytest.fixture
def client_for(serve):
    """client_for(engine) -> a client of `engine` served on a local socket."""
    return lambda engine: OpenAIClient(serve(engine.handler), "m", clock=Ticks())


def workload(**kw) -> Workload:
    return Workload(decode_max_tokens=32, prompt_sets=["prose"], prompts_per_set=2, repeats=2, **kw)


def test_fixed_length_decode_sends_ignore_eos_and_min_tokens_and_says_so(client_for):
    engine = Engine(natural=5)
    out = asyncio.run(throughput.measure_decode(client_for(engine), "prose", workload(fixed_length=True)))
    assert len(engine.bodies) == 4
    assert all(b["ignore_eos"] is True and b["min_tokens"] == 32 == b["max_tokens"] for b in engine.bodies)
    decode = out[0]
    assert decode.name == "decode_tps.prose" and decode.failed_requests == 0
    assert "exactly 32 output tokens (ignore_eos, min_tokens)" in decode.condition


def test_without_fixed_length_requests_stay_as_they_were(client_for):
    engine = Engine(natural=5)
    out = asyncio.run(throughput.measure_decode(client_for(engine), "prose", workload()))
    assert all("ignore_eos" not in b and "min_tokens" not in b for b in engine.bodies)
    assert "up to 32 output tokens" in out[0].condition


def test_a_fixed_length_request_that_comes_back_short_counts_as_failed(client_for):
    class Deaf(Engine):  # an engine that does not honour ignore_eos: stops at its natural length
        def handler(self, path: str, body: dict) -> Reply:
            return super().handler(path, {k: v for k, v in body.items() if k != "ignore_eos"})

    with pytest.raises(throughput.MeasurementFailed):
        asyncio.run(throughput.measure_decode(client_for(Deaf(natural=5)), "prose", workload(fixed_length=True)))


def test_concurrency_and_long_context_decode_use_fixed_lengths_too(client_for):
    engine = Engine(natural=3)
    w = workload(fixed_length=True, concurrency=[1, 4], decode_context_tokens=[100, 5000], prefill_repeats=2)

    async def build(target: int, salt: str) -> str:
        return f"{salt} " + "word " * target

    async def go():
        client = client_for(engine)
        return (
            await throughput.measure_concurrency(client, w),
            await throughput.measure_long_decode(client, w, build, context_tokens=1000),
        )

    conc, long = asyncio.run(go())
    assert conc[0].name == "output_tps.c4" and "exactly 32 output tokens" in conc[0].condition
    assert [m.name for m in long] == ["ctx_decode_tps.100", "ctx_ttft_ms.100"]  # 5000 does not fit in 1000
    assert "after a cold" in long[0].condition and len(long[0].samples) == 2
    assert all(b.get("ignore_eos") is True and b["min_tokens"] == 32 for b in engine.bodies)


# ---------------------------------------------------------------- recipe


def test_a_dummy_recipe_says_accuracy_is_not_applicable():
    launch = LaunchSpec(engine="vllm", nodes=[NodeLaunch(argv=[sys.executable, "-m", "vllm", "serve"])], port=8000)

    def trial(space) -> TrialResult:
        return TrialResult(
            study="s", number=0, candidate=baseline(space), status="ok", launch=launch,
            measurements=[Measurement.of("decode_tps.prose", "tok/s", "c", [1.0, 2.0])], objective=1.5, score=1.5,
        )

    dummy = load_space("vllm-qwen3-30b-a3b-dummy")
    recipe = recipe_from_trial(dummy, trial(dummy), None, "h200", 1)
    assert recipe.accuracy == ["not applicable (dummy weights)"]
    real = load_space("vllm-gemma3-270m")
    assert recipe_from_trial(real, trial(real), None, "h200", 1).accuracy == []


# ---------------------------------------------------------------- planner check


def point(shape: str, layers: int, gb: float, tps: float) -> pc.Point:
    return pc.Point(
        study=shape, shape=shape, trial=0, label="", n_layers=layers, eager=False, speculative=False,
        bytes_per_token=gb * 1e9, kv_bytes_per_token=0.0, bandwidth=4.8e12, decode_tps=tps,
        shipped_decode_tps=None, current_decode_tps=None, prefill_tps=None, bare_prefill_tps=None, extras={},
    )


def test_planner_form_fit_recovers_bandwidth_efficiency_and_overhead():
    # t = bytes / (4.8 TB/s x 0.5) + 1 ms, exactly
    pts = [point("a", 10, gb, 1 / (gb * 1e9 / 2.4e12 + 1e-3)) for gb in (1.0, 3.0, 6.0)]
    model = pc.fit_planner_form(pts)
    assert max(abs(e) for e in pc.errors(model, pts)) < 1e-9
    assert 1 / model(point("b", 10, 9.0, 1.0)) == pytest.approx(1 / (9e9 / 2.4e12 + 1e-3))


def test_held_out_never_scores_a_point_it_fitted_on():
    pts = [point("a", 12, 5.0, 500.0), point("a", 12, 2.5, 450.0), point("b", 48, 6.0, 240.0)]
    res = pc.held_out(pts, pc.fit_per_layer, lambda p: p.shape == "a")
    assert [p.shape for p, _ in res] == ["b"]
    # one layer count in the fit: the slope is 0 and the model is the mean step of shape a
    assert res[0][1] == pytest.approx((1 / ((1 / 500 + 1 / 450) / 2)) / 240 - 1)
    loo = pc.leave_one_out(pts, pc.fit_per_layer)
    assert len(loo) == 3


def test_a_trial_point_counts_active_weights_and_kv_bytes():
    space = load_space("vllm-qwen3-30b-a3b-dummy")
    trial = TrialResult(
        study="s", number=0, candidate=baseline(space), status="ok",
        measurements=[Measurement.of("decode_tps.prose", "tok/s", "c", [240.0, 244.0])],
    )
    p = pc.point(space, trial)
    kv = 2 * 48 * 4 * 128 * 2  # K and V, bf16, per cached token
    assert p.kv_bytes_per_token == kv
    assert p.bytes_per_token == pytest.approx(3.042e9 * 2 + kv * 384, rel=1e-3)  # short-prompt mean context
    assert p.roofline_fraction == pytest.approx(242.0 * p.bytes_per_token / 4.8e12)
    assert pc.context_bytes_per_token(p, 16384, 256) == pytest.approx(p.bytes_per_token + kv * (16384 - 256))


# ---------------------------------------------------------------- planner: online fp8 keeps 16-bit embeddings


@pytest.mark.parametrize(
    ("shape", "quant", "measured_gib"),
    [
        # vLLM 0.26.0 on the H200 (docs/measurements.md, 2026-12-01): "Model loading took N GiB"
        ("qwen3-30b-a3b", None, 56.88),
        ("qwen3-30b-a3b", "fp8", 29.06),
        ("minimax-m2-12l", None, 84.34),
        ("minimax-m2-12l", "fp8", 43.38),
    ],
)
def test_planner_weights_match_what_vllm_loaded(shape, quant, measured_gib):
    # online fp8 quantizes the linear layers; the embedding and the LM head stay bf16
    space = load_space(SPACES[shape])
    space = space.model_copy(update={"model": space.model.model_copy(update={"path": str(shape_dir(shape))})})
    from autotune.hardware.profiles import get_profile
    from autotune.planner.roofline import estimate

    candidate = baseline(space).model_copy(update={"params": {**baseline(space).params, "quantization": quant}})
    est = estimate(space, candidate, get_profile("h200"), 1)
    assert est.weights_gb == pytest.approx(measured_gib * 1.073741824, rel=0.01)


def test_planner_decode_reads_the_bf16_lm_head_under_online_fp8():
    space = load_space("vllm-qwen3-30b-a3b-dummy")
    space = space.model_copy(update={"model": space.model.model_copy(update={"path": str(shape_dir("qwen3-30b-a3b"))})})
    fp8 = baseline(space).model_copy(update={"params": {**baseline(space).params, "quantization": "fp8"}})
    trial = TrialResult(
        study="s", number=1, candidate=fp8, status="ok",
        measurements=[Measurement.of("decode_tps.prose", "tok/s", "c", [232.0, 233.0])],
    )
    p = pc.point(space, trial)
    head = 151936 * 2048
    kv = 2 * 48 * 4 * 128 * 2 * 384
    # 2.73B quantized active params at 1 byte + the 0.31B-param LM head at 2 bytes + KV
    assert p.bytes_per_token == pytest.approx((3.042e9 - head) * 1 + head * 2 + kv, rel=0.01)
