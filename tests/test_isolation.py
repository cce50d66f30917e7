"""Isolating the knob that broke (autotune/failures/isolation.py) and what a failure teaches (learning.py).

The delta-debugging logic is tested with a scripted launch function (it stands in for the engine
and says which candidates fail); the whole path — a real study, a real failure no signature
explains, real smoke launches, the learned failure pruning a later candidate, `show` — runs with
llama.cpp and the Gemma 3 270M GGUF below (engine-marked).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.failures.isolation import isolate, knob_diff, nearest_ran, reductions, widen
from autotune.failures.learning import blamed, isolations, learn_from_failure
from autotune.models import Candidate, FailureInfo, Scalar, TrialResult
from autotune.store import Store
from stand_in import StandIn
from gemma_space import GEMMA_ON_LLAMACPP

KNOBS = ["type_k", "type_v", "n_ctx", "flash_attn"]


def cand(**params: Scalar) -> Candidate:
    base: dict[str, Scalar] = {"type_k": "f16", "type_v": "f16", "n_ctx": 256, "flash_attn": False}
    return Candidate(engine="llamacpp", params={**base, **params})


def trial(number: int, candidate: Candidate, status: str = "ok", cls: str | None = None) -> TrialResult:
    failure = FailureInfo(failure_class=cls, message=f"{cls}: x") if cls else None
    return TrialResult(study="s", number=number, candidate=candidate, status=status, failure=failure)


def scripted(fails_when: dict[str, Scalar], cls: str = "context_creation_failed"):
    """A launch function standing in for the engine: fails when the candidate holds these values."""
    calls: list[Candidate] = []

    def launch(candidate: Candidate, name: str) -> FailureInfo | None:
        calls.append(candidate)
        if all(candidate.params.get(k) == v for k, v in fails_when.items()):
            return FailureInfo(failure_class=cls, message=f"{cls}: scripted")
        return None

    return launch, calls


def test_nearest_ran_is_the_trial_with_fewest_differing_knobs() -> None:
    failed = cand(type_k="q8_0", type_v="q4_0", n_ctx=512)
    trials = [trial(0, cand()), trial(1, cand(type_k="q8_0", n_ctx=512)), trial(2, cand(type_v="q4_0"), "failed", "x")]
    assert nearest_ran(failed, trials, KNOBS).number == 1  # the failed trial 2 never counts as "ran"
    assert knob_diff(failed, trials[1].candidate, KNOBS) == {"type_v": "q4_0"}
    assert nearest_ran(failed, [trials[2]], KNOBS) is None


def test_reductions_are_singletons_then_pairs_never_the_whole_set() -> None:
    assert list(reductions({"a": 1, "b": 2})) == [{"a": 1}, {"b": 2}]
    subsets = list(reductions({"a": 1, "b": 2, "c": 3}))
    assert subsets[:3] == [{"a": 1}, {"b": 2}, {"c": 3}] and {"a": 1, "b": 2} in subsets and len(subsets) == 6


def test_isolate_finds_the_one_value_that_reproduces_alone() -> None:
    failed = trial(1, cand(type_k="q8_0", type_v="q4_0", n_ctx=512), "failed", "context_creation_failed")
    launch, calls = scripted({"type_v": "q4_0"})
    found = isolate(failed, [trial(0, cand()), failed], KNOBS, launch)
    assert found.isolated == {"type_v": "q4_0"}
    assert found.launches == 2 and [a.failed for a in found.attempts] == [False, True]
    # reduced candidates are the one that ran plus one failed value, with the cheap n_ctx only
    # where n_ctx is not under test (here it is: it differs)
    assert calls[0].params == {**cand().params, "type_k": "q8_0"}
    assert "isolated type_v=q4_0 vs trial 0, 3 knob(s) differed; 2 launches" in found.summary()


def test_isolate_finds_a_pair_when_no_single_value_fails() -> None:
    failed = trial(1, cand(type_k="q8_0", type_v="q4_0", n_ctx=512), "failed", "unclassified_crash")
    launch, calls = scripted({"type_k": "q8_0", "n_ctx": 512}, cls="startup_crash")  # fallback classes match
    found = isolate(failed, [trial(0, cand()), failed], KNOBS, launch)
    assert found.isolated == {"type_k": "q8_0", "n_ctx": 512} and found.launches == 5  # 3 singles, then pairs


def test_isolate_without_launches_when_one_knob_differs_and_stops_at_the_budget() -> None:
    failed = trial(1, cand(type_v="q4_0"), "failed", "unclassified_crash")
    launch, calls = scripted({"never": 1})
    found = isolate(failed, [trial(0, cand()), failed], KNOBS, launch)
    assert found.isolated == {"type_v": "q4_0"} and found.launches == 0 and not calls
    failed = trial(1, cand(type_k="q8_0", type_v="q4_0", n_ctx=512, flash_attn=True), "failed", "unclassified_crash")
    found = isolate(failed, [trial(0, cand()), failed], KNOBS, launch, max_launches=3)
    assert found.isolated is None and found.launches == 3 and "budget" in found.verdict


def test_isolate_reports_why_nothing_was_isolated() -> None:
    failed = trial(0, cand(type_v="q4_0"), "failed", "unclassified_crash")
    launch, _ = scripted({})
    assert "no candidate has run" in isolate(failed, [failed], KNOBS, launch).verdict
    same = trial(1, cand(type_v="q4_0"), "failed", "unclassified_crash")
    assert "same configuration ran" in isolate(same, [trial(0, cand(type_v="q4_0")), same], KNOBS, launch).verdict


def test_widen_adds_values_a_working_run_refutes() -> None:
    failed = cand(type_v="q4_0", flash_attn=False)
    worked = trial(3, cand(type_v="q4_0", flash_attn=True))
    values, refuting = widen({"type_v": "q4_0"}, failed, [worked], KNOBS)
    assert values == {"type_v": "q4_0", "flash_attn": False} and refuting == [3]


def test_blame_the_engines_selection_not_every_auto_candidate() -> None:
    failure = FailureInfo(failure_class="backend_sliding_window", message="x", implicates=["attention_backend"])
    base = Candidate(engine="vllm", params={"attention_backend": None, "kv_cache_dtype": "auto"})
    auto_e5m2 = Candidate(engine="vllm", params={"attention_backend": None, "kv_cache_dtype": "fp8_e5m2"})
    learned = blamed(failure, auto_e5m2, {"attention_backend": "FLASHINFER"}, base)
    assert learned == [{"attention_backend": "FLASHINFER"}, {"attention_backend": None, "kv_cache_dtype": "fp8_e5m2"}]
    explicit = Candidate(engine="vllm", params={"attention_backend": "FLASHINFER", "kv_cache_dtype": "fp8_e5m2"})
    assert blamed(failure, explicit, {"attention_backend": "FLASHINFER"}, base) == [{"attention_backend": "FLASHINFER"}]


def test_learning_a_selection_blame_prunes_the_steering_combination_only(tmp_path: Path) -> None:
    from autotune.engines import get_engine
    from autotune.models import ModelSpec, SearchSpace
    from autotune.trial.context import TrialContext

    space = SearchSpace.model_validate({
        "name": "t", "engine": "vllm", "model": {"name": "m", "path": "m"},
        "knobs": [{"name": "attention_backend", "values": [None, "FLASHINFER", "TRITON_ATTN"]},
                  {"name": "kv_cache_dtype", "values": ["auto", "fp8_e5m2"], "default": "auto"}],
    })
    ctx = TrialContext(study="t", space=space, model=ModelSpec(name="m", path="m"), engine=get_engine("vllm"),
                       logs_dir=tmp_path)
    store = Store(tmp_path / "runs.db")
    failed = TrialResult(
        study="t", number=1, status="failed", selected={"attention_backend": "FLASHINFER"},
        candidate=Candidate(engine="vllm", params={"attention_backend": None, "kv_cache_dtype": "fp8_e5m2"}),
        failure=FailureInfo(failure_class="backend_sliding_window", message="x", implicates=["attention_backend"]),
    )
    base = Candidate(engine="vllm", params={"attention_backend": None, "kv_cache_dtype": "auto"})
    assert learn_from_failure(ctx, store, "host", failed, base, StandIn())
    rows = store.learned_failures("host", "vllm")
    assert [r.knob_values for r in rows] == [{"attention_backend": "FLASHINFER"},
                                            {"attention_backend": None, "kv_cache_dtype": "fp8_e5m2"}]
    assert not any(r.matches(base) for r in rows)  # auto with bf16 KV picks another backend: still tried
    assert isolations(store, "t") == []


def test_a_quantized_v_cache_failure_prunes_every_quantized_v_type_without_flash_attn(tmp_path: Path) -> None:
    """llama.cpp refuses every quantized V cache without flash attention, not only the one tried:
    after q4_0 fails, q8_0 (the same class, in the space) is skipped before launch; f16 V without
    flash attention and q8_0 V with it still run."""
    from autotune.engines import get_engine
    from autotune.models import ModelSpec, SearchSpace
    from autotune.engines.signatures import classify
    from autotune.space.candidates import Pruner
    from autotune.study.tuner import Tuner
    from autotune.trial.context import TrialContext

    space = SearchSpace.model_validate({
        "name": "t", "engine": "llamacpp", "model": {"name": "m", "path": "m"},
        "knobs": [{"name": "type_v", "values": ["f16", "q8_0", "q4_0"], "default": "f16"},
                  {"name": "flash_attn", "values": [False, True], "default": False}],
    })
    ctx = TrialContext(study="t", space=space, model=ModelSpec(name="m", path="m"), engine=get_engine("llamacpp"),
                       logs_dir=tmp_path)
    store = Store(tmp_path / "runs.db")
    log = Path(__file__).parent / "logs" / "kv_quant_needs_flash_attn__llamacpp_q4_0_kv_no_flash_attn.log"
    failure = classify(log.read_text(), engine="llamacpp")
    assert failure is not None and failure.failure_class == "kv_quant_needs_flash_attn"

    def kv(type_v: str, flash_attn: bool) -> Candidate:
        return Candidate(engine="llamacpp", params={"type_v": type_v, "flash_attn": flash_attn})

    failed = TrialResult(study="t", number=1, status="failed", candidate=kv("q4_0", False), failure=failure)
    assert learn_from_failure(ctx, store, "host", failed, kv("f16", False), StandIn())
    given = Pruner([])
    pruner = Tuner(ctx, store, given, "host", trials=1, launch=StandIn()).pruner  # the study's pre-launch check on learned failures
    assert given.checks == []  # the caller's pruner is not changed
    assert pruner.reason(kv("q4_0", False)) == "learned: flash_attn=False, type_v=q4_0 failed with kv_quant_needs_flash_attn in trial 1"
    assert pruner.reason(kv("q8_0", False)) == "learned: flash_attn=False, type_v=q8_0 failed with kv_quant_needs_flash_attn in trial 1"
    assert pruner.reason(kv("f16", False)) is None
    assert pruner.reason(kv("q8_0", True)) is None
    # one row per quantized value the space holds (q4_1 etc. are not in it), the sibling saying why
    rows = store.learned_failures("host", "llamacpp")
    assert [r.knob_values["type_v"] for r in rows] == ["q4_0", "q8_0"]
    assert all(r.study == "t" and r.trial == 1 for r in rows)
    assert not any("covered by" in line for line in rows[0].evidence)
    assert rows[1].evidence[:-1] == failure.evidence
    assert rows[1].evidence[-1] == (
        "autotune: q8_0 covered by the same signature as the failed q4_0 (every quantized type_v)")
    # the class is llama.cpp's own: every KV type the engine accepts but the float ones
    from autotune.engines.llamacpp import GGML_TYPES
    from autotune.engines.signatures import LLAMACPP_QUANTIZED_KV
    assert LLAMACPP_QUANTIZED_KV == set(GGML_TYPES) - {"f32", "f16", "bf16"}


# ---------------------------------------------------------------- for real: llama.cpp + Gemma 3 270M

SPACE = """
name: isolate-test
""" + GEMMA_ON_LLAMACPP + """plugin_flags: {{verbose: --verbose}}
# llama.cpp's own log off: the log shows only "Failed to create llama_context", which no
# signature can pin on a knob, so the study has to isolate it
fixed: {{verbose: false, chat_format: gemma, seed: 1234, flash_attn: false, n_threads: 2}}
knobs:
  - {{name: type_k, values: [f16, q8_0], default: f16}}
  - {{name: type_v, values: [f16, q4_0], default: f16}}
  - {{name: n_ctx, values: [512, 1024], default: 512}}
workload:
  decode_max_tokens: 16
  prompt_sets: [prose]
  prompts_per_set: 1
  repeats: 1
  warmup_requests: 0
  prefill_tokens: []
  startup_timeout_s: 120
gates: {{needle: null, qeval: null}}
"""


@pytest.mark.engine
def test_a_study_isolates_an_unexplained_failure_and_stops_launching_it(
    gemma_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    space_file = tmp_path / "space.yaml"
    space_file.write_text(SPACE.format(alias=f"iso-{uuid.uuid4().hex[:6]}", model=gemma_gguf))
    db = tmp_path / "runs.db"
    args = ["search", "--space", str(space_file), "--db", str(db), "--study", "iso", "--trials", "4",
            "--try", "type_k=q8_0,type_v=q4_0,n_ctx=1024"]
    assert main(args) == 0
    store = Store(db)
    trials = store.trials("iso")
    assert trials[0].status == "ok"
    failed = [t for t in trials if t.status == "failed"]
    assert len(failed) == 1, [(t.number, t.status, t.reason) for t in trials]
    assert failed[0].failure.failure_class == "context_creation_failed" and failed[0].failure.implicates == []
    [found] = isolations(store, "iso")
    assert found.nearest_trial == 0 and found.differing == {"type_k": "q8_0", "type_v": "q4_0", "n_ctx": 1024}
    assert found.isolated == {"type_v": "q4_0"}, found
    assert found.launches == 2 and [a.failed for a in found.attempts] == [False, True]
    host = store.db["hosts"].rows.__next__()["key"]
    learned = store.learned_failures(host, "llamacpp")
    assert [r.knob_values for r in learned] == [{"type_v": "q4_0"}]
    assert any("isolated type_v=q4_0" in line for line in learned[0].evidence)
    # no later candidate with type_v=q4_0 is launched; those sampled are skipped with the reason
    later = [t for t in trials if t.number > failed[0].number]
    assert not [t for t in later if t.status != "skipped" and t.candidate.params["type_v"] == "q4_0"]
    skipped = [t for t in later if t.status == "skipped"]
    assert all("learned: type_v=q4_0 failed with context_creation_failed" in (t.reason or "") for t in skipped)

    capsys.readouterr()
    assert main(["show", "--db", str(db), "--study", "iso"]) == 0
    out = capsys.readouterr().out
    assert f"type_v=q4_0: context_creation_failed in trial {failed[0].number}" in out  # learned from failures
    assert "isolated failures (2 extra launches in all)" in out
    assert "isolated type_v=q4_0 vs trial 0, 3 knob(s) differed; 2 launches" in out
