"""vLLM probes and tiny models without vLLM or a GPU.

The selector and launch tests run against a FAKE `vllm` (and `torch`) package written into a
temp dir at test time: it mimics the vLLM 0.2x APIs the probe calls (platform selector,
AttentionBackendEnum, AttentionSelectorConfig, CacheDType, get_quantization_config, the serve
CLI and its HTTP endpoints) and the real error strings, so the subprocess plumbing, the process
launcher and the classification path run for real. It proves nothing about vLLM itself; the GPU
run does that.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from autotune.engines.vllm import VllmEngine
from autotune.errors import ConfigError, EngineUnavailable
from autotune.probe.features import vllm as F
from autotune.models import ModelSpec, ProbeResult
from autotune.probe.programs import tiny_models as T

LOGS = Path(__file__).parent / "logs"

# ---------------------------------------------------------------------- the fake vLLM

FAKE_FILES = {
    "torch/__init__.py": """
        __version__ = "0.0-fake"
        bfloat16, float16, float32 = "torch.bfloat16", "torch.float16", "torch.float32"
    """,
    "vllm-0.26.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n",
    "vllm/__init__.py": "",
    "vllm/envs.py": """
        environment_variables = {"VLLM_USE_FLASHINFER_SAMPLER": None, "VLLM_DISABLED_KERNELS": None}
    """,
    "vllm/config/__init__.py": "",
    "vllm/config/cache.py": """
        from typing import Literal
        CacheDType = Literal["auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4"]
    """,
    "vllm/config/kernel.py": """
        from typing import Literal
        MoEBackend = Literal["auto", "triton", "marlin", "cutlass"]
    """,
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/layers/quantization/__init__.py": """
        class Fp8Config:
            @classmethod
            def get_min_capability(cls):
                return 89
        class FpQuantConfig:
            @classmethod
            def get_min_capability(cls):
                return 100
        def get_quantization_config(name):
            known = {"fp8": Fp8Config, "fp_quant": FpQuantConfig}
            if name not in known:
                raise ValueError(f"Invalid quantization method: {name}")
            return known[name]
    """,
    "vllm/v1/__init__.py": "",
    "vllm/v1/attention/__init__.py": "",
    "vllm/v1/attention/backends/__init__.py": "",
    "vllm/v1/attention/backends/registry.py": """
        import enum
        class AttentionBackendEnum(enum.Enum):
            FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
            FLASHINFER = "vllm.v1.attention.backends.flashinfer.FlashInferBackend"
            TRITON_ATTN = "vllm.v1.attention.backends.triton_attn.TritonAttentionBackend"
            FLEX_ATTENTION = "vllm.v1.attention.backends.flex_attention.FlexAttentionBackend"
            def get_path(self):
                return self.value
    """,
    "vllm/v1/attention/backends/fa_utils.py": """
        def get_flash_attn_version(requires_alibi=False, head_size=None):
            return 3
    """,
    "vllm/v1/attention/selector.py": """
        from typing import NamedTuple
        class AttentionSelectorConfig(NamedTuple):
            head_size: int
            dtype: object
            kv_cache_dtype: object
            block_size: object
            use_mla: bool = False
            has_sink: bool = False
    """,
    "vllm/platforms/__init__.py": """
        KV = {"FLASH_ATTN": {"auto", "bfloat16", "fp8", "fp8_e4m3"},
              "FLASHINFER": {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"},
              "TRITON_ATTN": {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"},
              "FLEX_ATTENTION": {"auto", "bfloat16"}}
        class Cap(tuple):
            def to_int(self):
                return self[0] * 10 + self[1]
        class FakeCuda:
            def get_device_capability(self, device_id=0):
                return Cap((9, 0))
            def get_device_name(self, device_id=0):
                return "FAKE H200"
            def reasons(self, name, cfg):
                return [] if cfg.kv_cache_dtype in KV[name] else ["kv_cache_dtype not supported"]
            def get_attn_backend_cls(self, selected_backend, attn_selector_config, num_heads=None):
                from vllm.v1.attention.backends.registry import AttentionBackendEnum as E
                cfg = attn_selector_config._replace(block_size=None)
                if selected_backend is not None:
                    why = self.reasons(selected_backend.name, cfg)
                    if why:
                        raise ValueError(f"Selected backend {selected_backend} is not valid for this configuration. Reason: {why}")
                    return selected_backend.get_path()
                invalid = {b.name: self.reasons(b.name, cfg) for b in E if self.reasons(b.name, cfg)}
                valid = [b for b in E if b.name not in invalid]
                if not valid:
                    text = ", ".join(f"{k}: [{', '.join(v)}]" for k, v in invalid.items())
                    raise ValueError(f"No valid attention backend found for cuda with {cfg!r}. Reasons: {{{text}}}.")
                return valid[0].get_path()
        current_platform = FakeCuda()
    """,
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/main.py": """
        import argparse, json, os, sys, time
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        if any(a == "--help=all" for a in sys.argv):
            print(open(os.environ["FAKE_VLLM_HELP"]).read())
            sys.exit(0)
        p = argparse.ArgumentParser()
        p.add_argument("cmd"); p.add_argument("model")
        p.add_argument("--port", type=int); p.add_argument("--host")
        p.add_argument("--kv-cache-dtype", default="auto"); p.add_argument("--attention-backend")
        p.add_argument("--speculative-config")
        args, _ = p.parse_known_args()
        print(f"(EngineCore pid={os.getpid()}) INFO [core.py:113] Initializing a V1 LLM engine (v0.26.0) with config: "
              f"model='{args.model}', speculative_config=None, dtype=torch.bfloat16, max_seq_len=1024, "
              f"quantization=None, enforce_eager=True, kv_cache_dtype={args.kv_cache_dtype}, device_config=cuda", flush=True)
        if args.kv_cache_dtype == "fp8_inc":
            time.sleep(600)
        if os.environ.get("FAKE_VLLM_FREE_GIB"):  # another process holds the GPU: vLLM's check at start
            print(f"ValueError: Free memory on device cuda:0 ({os.environ['FAKE_VLLM_FREE_GIB']}/79.18 GiB) on startup is "
                  "less than desired GPU memory utilization (0.9, 71.26 GiB). Decrease GPU memory utilization or reduce "
                  "GPU memory used by other processes.", flush=True)
            sys.exit(1)
        if args.kv_cache_dtype == "nvfp4":
            print("ValueError: No valid attention backend found for cuda with AttentionSelectorConfig(head_size=256, "
                  "dtype=torch.bfloat16, kv_cache_dtype=nvfp4, block_size=None). Reasons: {FLASH_ATTN: [kv_cache_dtype not supported]}.", flush=True)
            sys.exit(1)
        backend = args.attention_backend or "FLASH_ATTN"
        if args.attention_backend:
            print(f"INFO [cuda.py:318] Using AttentionBackendEnum.{backend} backend.", flush=True)
        else:
            print("INFO [cuda.py:482] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'TRITON_ATTN'].", flush=True)
        if backend == "TRITON_ATTN" and args.kv_cache_dtype == "fp8_e5m2":
            print('    assert self.kv_cache_dtype in {"fp8", "fp8_e4m3", "nvfp4"}', flush=True)
            print("AssertionError", flush=True)
            sys.exit(1)
        print("INFO [kv_cache_utils.py:2235] GPU KV cache size: 524,288 tokens", flush=True)
        state = {"drafts": 0.0, "accepted": 0.0}
        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass
            def reply(self, code, body, ctype="application/json"):
                data = body.encode()
                self.send_response(code); self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
            def do_GET(self):
                if self.path == "/health":
                    self.reply(200, "")
                elif self.path == "/metrics":
                    self.reply(200, f'vllm:spec_decode_num_drafts_total{{engine="0"}} {state["drafts"]}\\n'
                                    f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {state["accepted"]}\\n', "text/plain")
                else:
                    self.reply(404, "{}")
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if args.speculative_config:
                    state["drafts"] += 10; state["accepted"] += 15
                text = "" if args.kv_cache_dtype == "bfloat16" else " Paris, the capital"
                if backend == "FLEX_ATTENTION":
                    text = " Lyon"
                self.reply(200, json.dumps({"choices": [{"text": text}], "usage": {"completion_tokens": body["max_tokens"]}}))
        ThreadingHTTPServer((args.host, args.port), H).serve_forever()
    """,
}


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """A directory holding the fake packages, put on PYTHONPATH for every subprocess."""
    root = tmp_path / "fake_site"
    for rel, body in FAKE_FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body).lstrip("\n"))
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("FAKE_VLLM_HELP", str(LOGS / "vllm_serve_help_all.txt"))
    return root


@pytest.fixture
def gemma_dir(tmp_path):
    """A checkpoint directory with Gemma 3 270M's config.json and a (dummy) tokenizer file."""
    path = tmp_path / "gemma-3-270m-hf"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(T.GEMMA3_270M))
    (path / "tokenizer.json").write_text("{}")
    (path / "tokenizer_config.json").write_text("{}")
    return path


# ---------------------------------------------------------------------- combos


def test_combos_put_the_reference_first_and_carry_pruning_params():
    combos = F.make_combos(["fp8", "auto"], ["TRITON_ATTN", "auto"], [0, 4])
    assert combos[0] == F.Combo("auto", None, 0) and combos[0].is_reference
    assert len(combos) == 8
    assert F.Combo("fp8", "TRITON_ATTN").params() == {"kv_cache_dtype": "fp8", "attention_backend": "TRITON_ATTN"}
    assert F.Combo("fp8", None, 4).params() == {
        "kv_cache_dtype": "fp8", "attention_backend": None, "spec_method": "ngram", "draft_k": 4,
    }
    assert F.Combo("fp8", None, 4).label() == "kv_cache_dtype=fp8 attention_backend=auto draft_k=4"


def test_parse_combos_and_only_filter():
    combos = F.parse_combos("fp8:TRITON_ATTN, auto:auto ,fp8:auto:4")
    assert combos == [F.Combo("auto", None), F.Combo("fp8", "TRITON_ATTN"), F.Combo("fp8", None, 4)]
    assert F.filter_combos(combos, [("fp8", "auto")]) == [F.Combo("fp8", None, 4)]
    assert F.filter_combos(combos, None) == combos
    for bad in ("fp8", "fp8:X:Y:Z", ":auto", "fp8:auto:four"):
        with pytest.raises(ConfigError):
            F.parse_combos(bad)


def test_model_attention_reads_head_dim_and_dtype(gemma_dir, tmp_path):
    assert F.model_attention(gemma_dir) == (256, "bfloat16")
    nested = tmp_path / "vlm"
    nested.mkdir()
    (nested / "config.json").write_text(json.dumps({"architectures": ["X"], "text_config": {
        "hidden_size": 4096, "num_attention_heads": 32, "dtype": "float16"}}))
    assert F.model_attention(nested) == (128, "float16")
    with pytest.raises(ConfigError, match="does not exist"):
        F.model_attention(tmp_path / "missing")


def test_refused_combos_come_from_selector_failures_only():
    results = [
        {"feature": "selector:attention kv_cache_dtype=fp8_e5m2 attention_backend=FLASH_ATTN", "status": "fails",
         "params": {"kv_cache_dtype": "fp8_e5m2", "attention_backend": "FLASH_ATTN"}},
        {"feature": "selector:kv_cache_dtype=int2", "status": "fails", "params": {"kv_cache_dtype": "int2"}},
        {"feature": "launch:kv_cache_dtype=fp8 attention_backend=auto", "status": "fails",
         "params": {"kv_cache_dtype": "fp8", "attention_backend": None}},
        {"feature": "selector:attention kv_cache_dtype=auto attention_backend=auto", "status": "works",
         "params": {"kv_cache_dtype": "auto", "attention_backend": None}},
    ]
    combos = F.make_combos(["auto", "fp8", "fp8_e5m2", "int2"], ["auto", "FLASH_ATTN"], [0, 4])
    refused = F.refused_combos(combos, results)
    assert set(refused) == {F.Combo("fp8_e5m2", "FLASH_ATTN", 0), F.Combo("fp8_e5m2", "FLASH_ATTN", 4),
                            F.Combo("int2", None, 0), F.Combo("int2", "FLASH_ATTN", 0),
                            F.Combo("int2", None, 4), F.Combo("int2", "FLASH_ATTN", 4)}


# ---------------------------------------------------------------------- launch_matrix orchestration


def scripted_launcher(outcomes: dict[F.Combo, tuple[str, str | None]], calls: list[F.Combo]):
    def launcher(combo, model_dir, **kw):
        calls.append(combo)
        status, signature = outcomes.get(combo, ("works", None))
        if status == "raise":
            raise EngineUnavailable("no vLLM here")
        return ProbeResult(feature=f"launch:{combo.label()}", status=status, signature=signature, params=combo.params(),
                           evidence="scripted")
    return launcher


def test_launch_matrix_keeps_order_runs_reference_first_and_reports_each(tmp_path):
    combos = F.make_combos(["auto", "fp8"], ["auto", "TRITON_ATTN"])
    calls: list[F.Combo] = []
    seen: list[ProbeResult] = []
    launcher = scripted_launcher({F.Combo("fp8", "TRITON_ATTN"): ("fails", "kv_dtype_rejected"),
                                  F.Combo("fp8", None): ("raise", None)}, calls)
    results = F.launch_matrix("m", combos, log_dir=tmp_path, parallel=3, launcher=launcher, on_result=seen.append)
    assert calls[0] == F.Combo("auto", None)
    assert [r.feature for r in results] == [f"launch:{c.label()}" for c in combos]
    assert [r.status for r in results] == ["works", "works", "untested", "fails"]
    assert "no vLLM here" in results[2].evidence
    assert len(seen) == 4


def test_launch_matrix_only_and_budget(tmp_path):
    combos = F.make_combos(["auto", "fp8"], ["auto", "TRITON_ATTN"])
    calls: list[F.Combo] = []
    only = F.launch_matrix("m", combos, log_dir=tmp_path, only=[("fp8", "auto")], launcher=scripted_launcher({}, calls))
    assert [r.params["kv_cache_dtype"] for r in only] == ["fp8"] and calls == [F.Combo("fp8", None)]
    calls.clear()
    out = F.launch_matrix("m", combos, log_dir=tmp_path, budget_s=0, launcher=scripted_launcher({}, calls))
    assert calls == [] and {r.status for r in out} == {"untested"}
    assert "time budget" in out[0].evidence


def test_golden_mismatch_counts_only_when_the_reference_passes(tmp_path):
    combos = F.make_combos(["auto", "fp8"], ["auto"])
    trusted = F.launch_matrix("m", combos, log_dir=tmp_path, golden="Paris", launcher=scripted_launcher(
        {F.Combo("fp8", None): ("fails", "golden_mismatch")}, []))
    assert [r.status for r in trusted] == ["works", "fails"]
    untrusted = F.launch_matrix("m", combos, log_dir=tmp_path, golden="Paris", launcher=scripted_launcher(
        {F.Combo("auto", None): ("fails", "golden_mismatch"), F.Combo("fp8", None): ("fails", "golden_mismatch")}, []))
    assert [r.status for r in untrusted] == ["works", "works"]
    assert "golden ignored" in untrusted[1].evidence


def test_progress_shows_the_golden_verdict_that_will_be_stored(tmp_path):
    """The reference launches first, so each progress line can already carry the final status."""
    combos = F.make_combos(["auto", "fp8", "fp8_e5m2"], ["auto"])
    for scripted, expected in (
        ({F.Combo("auto", None): ("fails", "golden_mismatch"), F.Combo("fp8", None): ("fails", "golden_mismatch")},
         ["works", "works", "works"]),
        ({F.Combo("fp8", None): ("fails", "golden_mismatch")}, ["works", "fails", "works"]),
    ):
        shown: list = []
        stored = F.launch_matrix("m", combos, log_dir=tmp_path, golden="Paris", on_result=shown.append,
                                 launcher=scripted_launcher(scripted, []))
        assert [r.status for r in stored] == expected
        assert [r.status for r in shown] == expected


# ---------------------------------------------------------------------- against the fake vLLM


def test_selector_probe_through_a_subprocess(fake_vllm):
    info, results = F.selector_probe(head_dim=256, kv_dtypes=["auto", "fp8_e5m2", "nvfp4", "int2"],
                                     backends=[None, "FLASH_ATTN", "TRITON_ATTN", "NO_SUCH"],
                                     quantizations=["fp8", "fp_quant", "nope"], moe_backends=["marlin", "bogus"])
    assert info == {"vllm": "0.26.0", "torch": "0.0-fake", "device": "FAKE H200", "compute_capability": "sm_90"}
    by = {r.feature: r for r in results}
    assert by["flash_attn_version"].status == "works" and "-> 3" in by["flash_attn_version"].evidence
    ok = by["selector:attention kv_cache_dtype=fp8_e5m2 attention_backend=TRITON_ATTN"]
    assert ok.status == "works" and ok.evidence.startswith("selector: accepted -> ")
    assert ok.params == {"kv_cache_dtype": "fp8_e5m2", "attention_backend": "TRITON_ATTN"}
    refused = by["selector:attention kv_cache_dtype=fp8_e5m2 attention_backend=FLASH_ATTN"]
    assert refused.status == "fails" and "is not valid for this configuration" in refused.evidence
    nothing = by["selector:attention kv_cache_dtype=nvfp4 attention_backend=auto"]
    assert nothing.status == "fails" and "No valid attention backend found" in nothing.evidence
    assert by["selector:attention kv_cache_dtype=auto attention_backend=NO_SUCH"].status == "fails"
    assert by["selector:kv_cache_dtype=int2"].status == "fails"
    assert (by["selector:quantization=fp8"].status, by["selector:quantization=fp_quant"].status) == ("works", "fails")
    assert by["selector:quantization=nope"].status == "fails"
    assert by["selector:moe_backend=marlin"].status == "untested" and by["selector:moe_backend=bogus"].status == "fails"


def test_selector_probe_without_vllm_is_one_untested_result(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # no torch, no vllm
    info, results = F.selector_probe(head_dim=128)
    assert info == {} and len(results) == 1
    assert results[0].status == "untested" and "platform did not load" in results[0].evidence


def test_launch_one_against_fake_servers(fake_vllm, tmp_path):
    engine = VllmEngine(python=sys.executable)
    combos = [F.Combo("auto", None), F.Combo("nvfp4", None), F.Combo("fp8_e5m2", "TRITON_ATTN"),
              F.Combo("bfloat16", "FLASH_ATTN"), F.Combo("fp8", None, 4), F.Combo("fp8_inc", None)]
    results = F.launch_matrix(tmp_path / "model", combos, log_dir=tmp_path / "logs", engine=engine, timeout_s=5,
                              parallel=3)
    by = {r.params["kv_cache_dtype"]: r for r in results}
    assert by["auto"].status == "works" and "attention_backend=FLASH_ATTN" in by["auto"].evidence
    # evidence is the signature table's lines when autotune.engines.signatures knows the failure, else the error lines
    assert by["nvfp4"].status == "fails"
    assert by["nvfp4"].signature or "No valid attention backend" in by["nvfp4"].evidence
    assert by["fp8_e5m2"].status == "fails"
    assert by["fp8_e5m2"].signature or "AssertionError" in by["fp8_e5m2"].evidence
    assert by["bfloat16"].status == "fails" and "empty completion" in by["bfloat16"].evidence
    assert by["fp8"].status == "works" and "acceptance_length=2.50" in by["fp8"].evidence
    assert by["fp8_inc"].status == "untested" and "--timeout" in by["fp8_inc"].evidence
    argv_line = (tmp_path / "logs" / "kv_cache_dtype=fp8_attention_backend=auto_draft_k=4.log").read_text().splitlines()[0]
    for flag in ("--enforce-eager", "--load-format dummy", "--kv-cache-memory-bytes 1073741824", '"method":"ngram"'):
        assert flag in argv_line


def test_a_launch_the_host_stopped_is_untested_and_launched_again_by_the_next_probe(fake_vllm, tmp_path, monkeypatch):
    """An EngineCore left behind held 73 GiB of a lent H100 and the next launches failed with vLLM's
    free-memory check: a probe cell that fails so says nothing of its feature. It stays untested
    (the next `autotune probe` launches it again), with the class and what to do."""
    engine = VllmEngine(python=sys.executable)
    combos = [F.Combo("auto", None), F.Combo("fp8", "TRITON_ATTN")]
    monkeypatch.setenv("FAKE_VLLM_FREE_GIB", "5.78")
    held = F.launch_matrix(tmp_path / "model", combos, log_dir=tmp_path / "held", engine=engine, timeout_s=10)
    assert [r.status for r in held] == ["untested", "untested"]
    assert {r.signature for r in held} == {"gpu_memory_in_use"}
    assert all("nvidia-smi" in r.evidence and "probe again" in r.evidence for r in held)
    monkeypatch.delenv("FAKE_VLLM_FREE_GIB")
    again = F.launch_matrix(tmp_path / "model", combos, log_dir=tmp_path / "free", engine=engine, timeout_s=10,
                            only=[(r.params["kv_cache_dtype"], r.params["attention_backend"]) for r in held])
    assert [r.status for r in again] == ["works", "works"]


def test_cli_runs_selector_then_launches_and_writes_results(fake_vllm, gemma_dir, tmp_path):
    wrapper = tmp_path / "vllm-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{fake_vllm}" exec "{sys.executable}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "out" / "results.json"
    code = F.main(["--model", str(gemma_dir), "--out", str(out), "--launch", "--timeout", "15", "--python", str(wrapper),
                   "--kv", "auto", "fp8_e5m2", "nvfp4", "--backends", "auto", "FLASH_ATTN", "TRITON_ATTN",
                   "--golden", "Paris", "--budget-s", "120"])
    assert code == 0
    payload = json.loads(out.read_text())
    assert payload["head_dim"] == 256 and payload["info"]["compute_capability"] == "sm_90"
    by = {r["feature"]: r for r in payload["results"]}
    # refused by the selector: recorded once, never launched
    assert by["selector:attention kv_cache_dtype=nvfp4 attention_backend=auto"]["status"] == "fails"
    assert not any(f.startswith("launch:kv_cache_dtype=nvfp4") for f in by)
    assert "launch:kv_cache_dtype=fp8_e5m2 attention_backend=FLASH_ATTN" not in by
    assert any("refused by the selector" in n for n in payload["notes"])
    # launched: the selector's prior says works, the launch says fails
    assert by["selector:attention kv_cache_dtype=fp8_e5m2 attention_backend=TRITON_ATTN"]["status"] == "works"
    assert by["launch:kv_cache_dtype=fp8_e5m2 attention_backend=TRITON_ATTN"]["status"] == "fails"
    assert by["launch:kv_cache_dtype=auto attention_backend=auto"]["status"] == "works"
    assert payload["launch_env"] == {"VLLM_USE_FLASHINFER_SAMPLER": "0"}
    assert payload["launch_params"]["kv_cache_memory_bytes"] == 1 << 30
    assert (out.parent / "results-logs").is_dir()


# ---------------------------------------------------------------------- tiny models


def test_tiny_gemma_keeps_the_attention_shape_and_both_layer_kinds():
    cfg = T.tiny_config(T.GEMMA3_270M)
    assert T.attention_shape(cfg) == {"head_dim": 256, "num_attention_heads": 4, "num_key_value_heads": 1}
    assert cfg["num_hidden_layers"] == 2 and cfg["layer_types"] == ["sliding_attention", "full_attention"]
    assert (cfg["hidden_size"], cfg["intermediate_size"]) == (256, 512)
    assert cfg["sliding_window"] == 512 and cfg["query_pre_attn_scalar"] == 256 and cfg["vocab_size"] == 262144
    assert cfg["architectures"] == ["Gemma3ForCausalLM"]
    with pytest.raises(ConfigError, match="layer kinds"):
        T.tiny_config(T.GEMMA3_270M, layers=1)


def test_tiny_config_makes_head_dim_explicit_and_unnests_multimodal_configs():
    target = {"architectures": ["Gemma3ForConditionalGeneration"], "quantization_config": {"x": 1},
              "text_config": {"model_type": "gemma3_text", "hidden_size": 2560, "num_attention_heads": 8,
                              "num_key_value_heads": 4, "num_hidden_layers": 34, "sliding_window_pattern": 6}}
    cfg = T.tiny_config(target, layers=2)
    assert cfg["head_dim"] == 320 and cfg["architectures"] == ["Gemma3ForCausalLM"]
    assert cfg["sliding_window_pattern"] == 2 and "quantization_config" not in cfg


def test_tiny_moe_keeps_routing_and_shrinks_widths():
    target = {"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "num_attention_heads": 128,
              "head_dim": 128, "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
              "first_k_dense_replace": 3, "kv_lora_rank": 512}
    cfg = T.tiny_config(target, layers=2)
    assert (cfg["n_routed_experts"], cfg["num_experts_per_tok"], cfg["kv_lora_rank"]) == (256, 8, 512)
    assert cfg["moe_intermediate_size"] == 512 and cfg["first_k_dense_replace"] == 1


def test_llama_config_from_a_model_spec():
    spec = ModelSpec(name="llama", path="/m", n_heads=32, n_kv_heads=8, head_dim=128)
    cfg = T.config_from_spec(spec)
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert T.attention_shape(cfg) == {"head_dim": 128, "num_attention_heads": 32, "num_key_value_heads": 8}
    with pytest.raises(ConfigError, match="lacks n_heads, head_dim"):
        T.config_from_spec(ModelSpec(name="x", path="/m"))
    with pytest.raises(ConfigError, match="do not split"):
        T.llama_config(head_dim=64, n_heads=6, n_kv_heads=4)


def test_build_without_weights_copies_the_target_tokenizer(gemma_dir, tmp_path):
    out = T.build(tmp_path / "tiny", T.tiny_config(T.GEMMA3_270M), tokenizer_from=gemma_dir, weights=False)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer.json", "tokenizer_config.json"]
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    empty = tmp_path / "no-tokenizer"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no tokenizer files"):
        T.build(tmp_path / "tiny2", T.tiny_config(T.GEMMA3_270M), tokenizer_from=empty, weights=False)


def test_byte_tokenizer_round_trips_text(tmp_path):
    pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    out = T.build(tmp_path / "tiny", T.llama_config(head_dim=64, n_heads=4, n_kv_heads=2), weights=False)
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    ids = tok("héllo")["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "héllo" and max(ids) < T.BYTE_VOCAB_SIZE
    assert json.loads((out / "config.json").read_text())["vocab_size"] == T.BYTE_VOCAB_SIZE


def test_tiny_models_cli_writes_a_config(gemma_dir, tmp_path, capsys):
    T.main(["--like", str(gemma_dir), "--out", str(tmp_path / "t"), "--no-weights", "--layers", "3"])
    cfg = json.loads((tmp_path / "t" / "config.json").read_text())
    assert cfg["layer_types"] == ["sliding_attention", "full_attention", "sliding_attention"]
    assert "head_dim': 256" in capsys.readouterr().out


def test_fake_package_is_not_importable_here():
    """Guard: the fake lives only on subprocess PYTHONPATHs, never in this interpreter."""
    assert "vllm" not in sys.modules and os.environ.get("FAKE_VLLM_HELP") is None


def test_a_port_clash_with_a_neighbour_is_retried_once(tmp_path):
    calls: list[Path] = []

    def launcher(combo, model_dir, *, log_path, **kw):
        calls.append(log_path)
        log_path.write_text("OSError: [Errno 98] Address already in use\n" if len(calls) == 1 else "fine\n")
        status = "fails" if len(calls) == 1 else "works"
        return ProbeResult(feature=f"launch:{combo.label()}", status=status, params=combo.params())

    [result] = F.launch_matrix("m", [F.Combo("auto", None)], log_dir=tmp_path, launcher=launcher)
    assert result.status == "works" and [p.name for p in calls] == [
        "kv_cache_dtype=auto_attention_backend=auto.log", "kv_cache_dtype=auto_attention_backend=auto-retry.log"]
