"""llama.cpp feature probes on the real Gemma 3 270M GGUF (a small subset of the matrix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import ModelNotFound
from autotune.probe.features.llamacpp import (
    MATCH_TOKENS,
    REFERENCE,
    LlamaCppConfig,
    _judge,
    default_configs,
    probe_llamacpp,
)
from autotune.models import ProbeResult
from autotune.engines.signatures import GOLDEN_MISMATCH_MARKER


@pytest.mark.engine
def test_real_subset(gemma_gguf: Path) -> None:
    q4_v_no_fa = LlamaCppConfig("f16", "q4_0", flash_attn=False)
    q8_fa = LlamaCppConfig("q8_0", "q8_0", flash_attn=True)
    draft = LlamaCppConfig(draft_k=2)
    results = probe_llamacpp(str(gemma_gguf), timeout_s=180, configs=[q4_v_no_fa, q8_fa, draft])
    by_feature = {r.feature: r for r in results}
    # the reference first, then riskiest first (more non-default values; autotune/probe/order.py)
    assert [r.feature for r in results] == [REFERENCE.feature, q8_fa.feature, q4_v_no_fa.feature, draft.feature]

    reference = by_feature["type_k=f16,type_v=f16,flash_attn=off"]
    assert reference.status == "works", reference.evidence
    assert reference.params == {"type_k": "f16", "type_v": "f16", "flash_attn": False}

    failed = by_feature["type_k=f16,type_v=q4_0,flash_attn=off"]
    assert failed.status == "fails"
    assert failed.signature == "kv_quant_needs_flash_attn"
    assert "quantized V cache requires flash_attn" in failed.evidence  # llama.cpp's own log line
    assert failed.params == {"type_k": "f16", "type_v": "q4_0", "flash_attn": False}

    quantized = by_feature["type_k=q8_0,type_v=q8_0,flash_attn=on"]
    assert quantized.status == "works", quantized.evidence
    assert "match the f16/f16 reference" in quantized.evidence

    drafted = by_feature["draft_k=2"]
    assert drafted.status == "works", drafted.evidence
    assert drafted.params == {"draft_k": 2}
    assert all(r.duration_s > 0 for r in results)


def test_missing_model_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound):
        probe_llamacpp(str(tmp_path / "none.gguf"))


def test_default_matrix() -> None:
    configs = default_configs(draft_ks=(2, 4))
    assert len(configs) == 3 * 3 * 2 + 2
    assert len({c.feature for c in configs}) == len(configs)
    assert REFERENCE in configs


def _raw(tokens: list[list[int]], feature: str = "type_k=q4_0,type_v=q4_0,flash_attn=on") -> ProbeResult:
    report = {"tokens": tokens, "texts": ["a", "b"], "load_s": 1.0, "generate_s": 1.0}
    return ProbeResult(feature=feature, status="works", evidence=json.dumps(report))


def test_golden_check_rules() -> None:
    ref = [[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11]]
    # later tokens may drift (quantized KV flips near-ties); the first MATCH_TOKENS may not
    drift = [row[:MATCH_TOKENS] + [99] for row in ref]
    assert _judge(_raw(drift), drift, ref).status == "works"
    wrong = [[1, 2, 99, 4], ref[1]]
    judged = _judge(_raw(wrong), wrong, ref)
    assert judged.status == "fails" and judged.signature == "silent_miscompute"
    assert judged.evidence.startswith(GOLDEN_MISMATCH_MARKER)
    stuck = [[5, 5, 5, 5, 5], [5, 5, 5, 5, 5]]
    assert _judge(_raw(stuck), stuck, None).status == "fails"
    empty = [[], [1, 2]]
    assert _judge(_raw(empty), empty, None).status == "fails"
