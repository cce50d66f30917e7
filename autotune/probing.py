"""`autotune probe`: identity, kernel micro-probes and engine feature probes, stored per host
fingerprint in runs.db and reused until --refresh. `autotune search` prunes with the same rows."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from autotune.engines import get_engine
from autotune.errors import ConfigError, ProbeError
from autotune.model_files import resolve_model
from autotune.models import FailureInfo, ProbeReport, ProbeResult
from autotune.search import check_writable, detect_device, fingerprint
from autotune.space import load_space
from autotune.store import Store


def classify_log(path: Path) -> FailureInfo | None:
    from probes.signatures import classify

    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read log {path}: {exc.strerror}") from exc
    return classify(text)


def vllm_probes(model_path: str, timeout_s: float, logs_dir: Path, budget_s: float = 480.0) -> list[ProbeResult]:
    """vLLM's own selectors first (a prior), then real launches of every KV dtype x attention
    backend the selectors accept (eager, real weights), within `budget_s`; each launch's greedy
    answer must start like the reference launch's (auto KV dtype, auto backend)."""
    from probes.vllm_features import REFERENCE_GOLDEN
    from probes.vllm_features import main as vllm_features_main

    logs_dir.mkdir(parents=True, exist_ok=True)
    out = logs_dir / "vllm_features.json"
    argv = ["--model", model_path, "--out", str(out), "--logs", str(logs_dir), "--launch", "--real-weights"]
    argv += ["--golden", REFERENCE_GOLDEN, "--parallel", "3", "--timeout", f"{timeout_s:g}", "--budget-s", f"{budget_s:g}"]
    # FlashInfer JIT-compiles its kernels on first use (minutes): launch it last, inside the budget
    argv += ["--backends", "auto", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHINFER"]
    with contextlib.redirect_stdout(sys.stderr):  # its progress lines must not mix into --json output
        code = vllm_features_main(argv)
    if not out.exists():
        raise ProbeError(f"vLLM feature probes wrote no results (exit {code}); logs in {logs_dir}")
    return [ProbeResult.model_validate(r) for r in json.loads(out.read_text())["results"]]


def run_engine_probes(
    engine_name: str, model_path: str, timeout_s: float, budget_s: float, logs_dir: Path
) -> list[ProbeResult]:
    if engine_name == "llamacpp":
        from probes.llamacpp_features import probe_llamacpp

        return probe_llamacpp(model_path, timeout_s=timeout_s)
    if engine_name == "vllm":
        return vllm_probes(model_path, timeout_s, logs_dir, budget_s)
    raise ConfigError(f"no feature probes for engine {engine_name!r}")


def probe(
    *,
    db_path: Path,
    space_name: str,
    model_path: str | None,
    refresh: bool,
    engine_probes: bool = True,
    timeout_s: float = 300.0,
    budget_s: float = 480.0,
    logs_dir: Path = Path("autotune-logs") / "probe",
) -> ProbeReport:
    space = load_space(space_name)
    engine = get_engine(space.engine)
    model = resolve_model(space.model, model_path) if engine_probes else space.model
    if engine_probes:
        engine.check_available()
    check_writable(db_path)
    device = detect_device()
    host = fingerprint(device, engine)
    store = Store(db_path)
    host_key = store.save_host(host)
    stored = store.probe_results(host_key)
    if stored and not refresh:
        return ProbeReport(
            device=device, engine=engine.name, engine_version=engine.version(), host_key=host_key, results=stored, reused=True
        )
    from probes.kernels import run_kernel_probes

    results = run_kernel_probes(timeout_s=min(timeout_s, 180.0))
    if engine_probes:
        assert model.path
        results += run_engine_probes(engine.name, model.path, timeout_s, budget_s, logs_dir)
    store.save_probe_results(host_key, results)
    return ProbeReport(device=device, engine=engine.name, engine_version=engine.version(), host_key=host_key, results=results)

