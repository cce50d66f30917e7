"""The rows of vLLM's probe launch matrix from the installed version's choices (both recorded
versions through the FAKE vLLM of tests/fakes/vllm_site.py), and the rows written for 0.26.0
where the choices are not known."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from fakes.vllm_site import recorded_choices, write_fake_vllm

from autotune.engines.base import ProbeRequest
from autotune.engines.vllm import VllmEngine
from autotune.engines.vllm_choices import EngineChoices
from autotune.errors import ProbeError
from autotune.models import SearchSpace
from autotune.probe.features import vllm as features
from autotune.probe.features.vllm_rows import BACKENDS, KV_DTYPES, RowsSource, matrix_rows, rows_for


def recorded(version: str) -> EngineChoices:
    return EngineChoices.model_validate_json(recorded_choices(version).read_text())


def space(kv: list, backends: list) -> SearchSpace:
    return SearchSpace.model_validate({
        "name": "s", "engine": "vllm", "model": {"name": "m", "path": "/m"},
        "knobs": [{"name": "kv_cache_dtype", "values": kv, "default": kv[0]},
                  {"name": "attention_backend", "values": backends, "default": backends[0]}],
    })


def test_without_the_choices_the_rows_are_the_ones_written_for_026():
    rows = matrix_rows(None)
    assert (rows.kv_dtypes, rows.backends, rows.source) == (KV_DTYPES, BACKENDS, RowsSource.WRITTEN)
    assert KV_DTYPES == ("auto", "fp8", "fp8_e5m2", "nvfp4")


def test_026_lists_every_written_row_and_no_sm12x_backend():
    rows = matrix_rows(recorded("0.26.0"))
    assert (rows.kv_dtypes, rows.backends, rows.source) == (KV_DTYPES, BACKENDS, RowsSource.ENGINE)


def test_033_adds_the_sm12x_attention_backend_it_lists():
    rows = matrix_rows(recorded("0.33.0"))
    assert rows.kv_dtypes == KV_DTYPES and rows.backends == (*BACKENDS, "B12X")


def test_a_row_the_version_does_not_list_is_dropped():
    fewer = recorded("0.33.0").model_copy(update={
        "kv_cache_dtypes": [k for k in recorded("0.33.0").kv_cache_dtypes if k != "fp8_e5m2"],
        "attention_backends": [b for b in recorded("0.33.0").attention_backends if b != "FLEX_ATTENTION"],
    })
    rows = matrix_rows(fewer)
    assert "fp8_e5m2" not in rows.kv_dtypes and "FLEX_ATTENTION" not in rows.backends


def test_the_spaces_values_join_the_rows_where_the_version_accepts_them():
    s = space(["auto", "nvfp4_4over6"], [None, "flash_attn", "TRITON_MLA"])
    new = matrix_rows(recorded("0.33.0"), s)
    assert new.kv_dtypes == (*KV_DTYPES, "nvfp4_4over6")
    assert new.backends == (*BACKENDS, "B12X", "TRITON_MLA")  # flash_attn is FLASH_ATTN, once
    old = matrix_rows(recorded("0.26.0"), s)
    assert "nvfp4_4over6" not in old.kv_dtypes and "TRITON_MLA" in old.backends


@pytest.mark.parametrize(("version", "b12x"), [("0.26.0", False), ("0.33.0", True)])
def test_feature_probes_launch_the_installed_versions_rows(version, b12x, tmp_path, monkeypatch):
    site = write_fake_vllm(tmp_path / "site", version)
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("AUTOTUNE_CACHE", str(tmp_path / "cache"))
    importlib.invalidate_caches()
    seen: list[list[str]] = []

    def run(argv: list[str]) -> int:  # the matrix program: record what it was asked, write no results
        seen.append(argv)
        return 0

    monkeypatch.setattr(features, "main", run)
    request = ProbeRequest("/m", timeout_s=1, budget_s=1, logs_dir=tmp_path / "logs", host_key="host")
    with pytest.raises(ProbeError, match="wrote no results"):
        VllmEngine().feature_probes(request)
    [argv] = seen
    backends = argv[argv.index("--backends") + 1: argv.index("--python")]
    assert backends[0] == "auto" and ("B12X" in backends) == b12x
    assert argv[argv.index("--kv") + 1: argv.index("--backends")] == list(KV_DTYPES)
    # without a host fingerprint the choices are not read: the written rows
    assert rows_for(VllmEngine(), ProbeRequest("/m", 1, 1, Path("logs")), None).source == RowsSource.WRITTEN
