"""Issue 53: before a ground-truth table is replayed, an analysis of variance says whether it is the
table wanted: at least two knobs with effects beyond the launch noise, and at least one interaction
(benchmarks/table_anova.py)."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

from autotune.space.candidates import enumerate_candidates, load_space

ROOT = Path(__file__).resolve().parents[1]
MINIMAX_C8 = ROOT / "benchmarks" / "data" / "gt-vllm-minimax-h200-c8.json"


def synthetic(effects, noise: float = 0.01, seed: int = 0) -> dict:
    """The gt24 space's 24 candidates, each launched twice, log(objective) = the sum of `effects`
    (candidate params -> log factor) plus Gaussian launch noise; launches a minute apart, one machine."""
    space = load_space(str(ROOT / "benchmarks" / "spaces" / "vllm-llama3.1-8b-gt24.yaml"))
    rng = random.Random(seed)
    minute = itertools.count()
    candidates = []
    for c in enumerate_candidates(space):
        level = math.log(200.0) + sum(f(c.params) for f in effects)
        launches = [{"status": "ok", "objective": math.exp(level + rng.gauss(0, noise)),
                     "started_at": f"2026-12-07T10:{next(minute):02d}:00+00:00"} for _ in range(2)]
        candidates.append({"key": c.key(), "params": dict(c.params), "launches": launches})
    return {"space": json.loads(space.model_dump_json()), "candidates": candidates}


def test_two_knobs_and_their_interaction_are_found_and_a_null_knob_is_not(ta):
    fp8 = lambda p: 0.3 if p["quantization"] == "fp8" else 0.0  # noqa: E731
    kv = lambda p: 0.1 if p["kv_cache_dtype"] == "fp8" else 0.0  # noqa: E731
    # the KV dtype helps only where the backend is Triton: an interaction, no main effect of the backend alone
    both = lambda p: 0.15 if p["kv_cache_dtype"] == "fp8" and p["attention_backend"] == "TRITON_ATTN" else 0.0  # noqa: E731
    report = ta.anova(synthetic([fp8, kv, both]))
    significant = {t.term for t in report.terms if t.p < 0.01}
    assert {"quantization", "kv_cache_dtype", "kv_cache_dtype:attention_backend"} <= significant
    assert "cudagraph_mode" not in significant
    assert report.wanted and report.pure_error_df == 24  # 48 launches of 24 cells


def test_a_table_with_one_decision_is_not_the_table_wanted(ta):
    report = ta.anova(synthetic([lambda p: 0.3 if p["quantization"] == "fp8" else 0.0]))
    assert not report.wanted
    assert "1 knob" in report.verdict


def test_the_h200_8_stream_table_has_two_knobs_and_one_decision_to_find(ta):
    """The measured MiniMax-shape table (H200, 8 streams), as committed: fp8 weights and max_num_seqs
    both act beyond the noise, and interact (so it passes the analysis), yet its best candidate is one
    knob off the baseline among those the noise cannot tell from the best, fp8 weights (the planner's
    first pick in 100 of 100 replays): the report
    says both, so a table is judged by more than its F tests."""
    report = ta.anova(json.loads(MINIMAX_C8.read_text()))
    significant = {t.term for t in report.terms if t.p < 0.01}
    assert {"quantization", "max_num_seqs", "quantization:max_num_seqs"} <= significant
    assert report.optimum_changes == 1 and report.optimum == "quantization=fp8"
    assert "the nearest to the baseline changes 1 knob (quantization=fp8)" in report.verdict


CPU_TABLE = ROOT / "benchmarks" / "data" / "gt-llamacpp-gemma3-270m-cpu.json"


def test_a_rank_deficient_table_judges_each_term_by_what_it_adds(ta):
    """The CPU table never ran a quantized V cache without flash attention (llama.cpp refuses it), so
    type_v:flash_attn is aliased with the terms below it. statsmodels' type II table on that design
    depends on its version (0.15 gave type_v F 753, p 3e-26, from the aliasing alone); each term is
    judged by the nested models with and without it instead, so type_v adds what it adds (F near 1)
    and the aliased pair, which adds no column of its own, is not tested at all."""
    report = ta.anova(json.loads(CPU_TABLE.read_text()))
    by_term = {t.term: t for t in report.terms}
    assert by_term["type_v"].df == 1 and by_term["type_v"].p > 0.05
    assert "type_v:flash_attn" not in by_term and "type_v:flash_attn" in report.aliased
    assert {"n_threads", "draft_k", "type_k:draft_k"} <= {t.term for t in report.terms if t.p < 0.01}
