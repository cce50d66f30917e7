"""Probe launches in risk order, and `autotune probe` resuming the cells a budget left untested."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.probe.features.vllm import BACKENDS, DEFAULTS, KV_DTYPES, Combo, make_combos, plan_launches
from autotune.probe.order import (
    ACCEPTED_UNCONFIRMED,
    BUDGET_USED_UP,
    IN_SPACE,
    OUTSIDE_SPACE,
    REFERENCE,
    order_cells,
    settled,
    space_uses,
    untested_summary,
)
from autotune.models import ProbeResult, SearchSpace
from autotune.store import Store

SPACE = SearchSpace.model_validate({
    "name": "order-test", "engine": "vllm", "model": {"name": "m", "path": "m"},
    "knobs": [{"name": "kv_cache_dtype", "values": ["auto", "fp8", "fp8_e5m2"], "default": "auto"},
              {"name": "attention_backend", "values": [None, "FLASHINFER", "TRITON_ATTN"]}],
})


def selector(kv: str, backend: str | None, status: str = "works") -> ProbeResult:
    return ProbeResult(feature=f"selector:{kv}:{backend}", status=status,
                       params={"kv_cache_dtype": kv, "attention_backend": backend})


def test_space_uses_a_cell_only_when_a_candidate_holds_all_its_values() -> None:
    assert space_uses({"kv_cache_dtype": "fp8", "attention_backend": "FLASHINFER"}, SPACE, DEFAULTS)
    assert not space_uses({"kv_cache_dtype": "nvfp4", "attention_backend": None}, SPACE, DEFAULTS)
    assert not space_uses({"kv_cache_dtype": "auto", "attention_backend": "FLASH_ATTN"}, SPACE, DEFAULTS)
    # a knob the space leaves alone is only "used" at the engine default
    assert space_uses({"kv_cache_dtype": "auto", "attention_backend": None, "draft_k": 0}, SPACE, DEFAULTS)
    assert not space_uses({"kv_cache_dtype": "auto", "attention_backend": None, "draft_k": 4}, SPACE, DEFAULTS)
    assert space_uses({"kv_cache_dtype": "nvfp4"}, None, DEFAULTS)


def test_risky_cells_the_space_uses_go_first_unused_ones_last() -> None:
    combos = make_combos(KV_DTYPES, ["auto", *BACKENDS])
    prior = [selector("fp8_e5m2", "FLASHINFER"), selector("fp8", "TRITON_ATTN"), selector("nvfp4", None, "fails")]
    ordered = order_cells(combos, Combo.params, is_reference=lambda c: c.is_reference, space=SPACE,
                          defaults=DEFAULTS, prior=prior)
    assert [c for c, _ in ordered][0].is_reference and ordered[0][1] == REFERENCE
    why = [w for _, w in ordered]
    assert why[1:3] == [ACCEPTED_UNCONFIRMED, ACCEPTED_UNCONFIRMED]
    assert {(c.kv_cache_dtype, c.attention_backend) for c, w in ordered if w == ACCEPTED_UNCONFIRMED} == {
        ("fp8_e5m2", "FLASHINFER"), ("fp8", "TRITON_ATTN")}
    in_space = [c for c, w in ordered if w == IN_SPACE]
    assert len(in_space) == 9 - 1 - 2  # 3 KV x 3 backends, less the reference and the two above
    # within a group, more non-default values first: fp8+FLASHINFER before auto+FLASHINFER
    assert in_space.index(Combo("fp8", "FLASHINFER")) < in_space.index(Combo("auto", "FLASHINFER"))
    assert why.index(OUTSIDE_SPACE) == 9 and set(why[9:]) == {OUTSIDE_SPACE}
    assert len(ordered) == len(combos)


def test_vllm_plan_reads_the_selector_results_it_just_wrote() -> None:
    combos = make_combos(["auto", "fp8_e5m2"], ["auto", "FLASHINFER"])
    payload = [selector("fp8_e5m2", "FLASHINFER").model_dump()]
    plan = plan_launches(combos, "vllm-gemma3-270m", payload)
    assert list(plan.values())[:2] == [REFERENCE, ACCEPTED_UNCONFIRMED]
    assert next(iter(list(plan)[1:])) == Combo("fp8_e5m2", "FLASHINFER")


def test_settled_and_untested_summary() -> None:
    results = [
        ProbeResult(feature="a", status="works", params={"x": 1}),
        ProbeResult(feature="b", status="untested", params={"x": 2}, evidence=f"{BUDGET_USED_UP}; {IN_SPACE}"),
        ProbeResult(feature="c", status="untested", params={"x": 3}, evidence=f"{BUDGET_USED_UP}; {OUTSIDE_SPACE}"),
    ]
    assert settled(results) == {"a"}
    assert untested_summary(results) == {BUDGET_USED_UP: 2}


@pytest.mark.engine
def test_probe_spends_its_budget_in_risk_order_and_resumes_what_it_left(
    gemma_gguf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    base = ["probe", "--db", str(db), "--space", "llamacpp-gemma3-270m", "--model", str(gemma_gguf), "--json"]
    capsys.readouterr()
    assert main([*base, "--budget", "0"]) == 0
    first = json.loads(capsys.readouterr().out)
    cells = [r for r in first["results"] if r["params"]]
    assert cells[0]["feature"] == "type_k=f16,type_v=f16,flash_attn=off" and cells[0]["status"] == "works"
    untested = [r for r in cells if r["status"] == "untested"]
    assert len(untested) == len(cells) - 1 and all(r["evidence"].startswith(BUDGET_USED_UP) for r in untested)
    # the space uses every KV cell; draft_k 2 / 4 too: the order puts two non-default values first
    assert untested[0]["params"]["type_k"] != "f16" and untested[0]["params"]["type_v"] != "f16"

    # the budget counts after the reference (always run): 1 s starts the riskiest cell, and the next
    # ones only while the second has not run out (a cell that fails at once takes well under 1 s)
    assert main([*base[:-1], "--budget", "1"]) == 0
    out = capsys.readouterr().out
    launched = re.search(r"resumed: (\d+) cell\(s\) an earlier probe left untested were launched now", out)
    assert launched and 1 <= int(launched.group(1)) < len(untested)
    stored = {r.feature: r for r in Store(db).probe_results(first["host_key"])}
    assert stored[untested[0]["feature"]].status in ("works", "fails")  # the riskiest cell ran first
    left = [r for r in stored.values() if r.status == "untested"]
    assert len(left) == len(untested) - int(launched.group(1))
    assert f"{len(left)} launch cell(s) stayed untested" in out and BUDGET_USED_UP in out
