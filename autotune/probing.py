"""`autotune probe`: identity, kernel micro-probes and engine feature probes, stored per host
fingerprint in runs.db and reused until --refresh. `autotune search` prunes with the same rows.

Engine launches run in the order of probes/launch_order.py (what the space uses first) within the
time budget; cells left untested are launched by the next `autotune probe` (it resumes from
runs.db, like a study)."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from autotune.engines import get_engine
from autotune.errors import ConfigError, ProbeError
from autotune.model_files import resolve_model
from autotune.models import FailureInfo, ProbeReport, ProbeResult, Scalar
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


def vllm_probes(
    model_path: str,
    timeout_s: float,
    logs_dir: Path,
    budget_s: float = 480.0,
    space_name: str | None = None,
    only: list[ProbeResult] | None = None,
) -> list[ProbeResult]:
    """vLLM's own selectors first (a prior), then real launches of every KV dtype x attention
    backend the selectors accept (eager, real weights), within `budget_s`, what the space uses
    first; each launch's greedy answer must start like the reference launch's (auto KV dtype, auto
    backend). `only`: launch just these cells (the ones an earlier probe left)."""
    from probes.vllm_features import REFERENCE_GOLDEN
    from probes.vllm_features import main as vllm_features_main

    logs_dir.mkdir(parents=True, exist_ok=True)
    out = logs_dir / "vllm_features.json"
    argv = ["--model", model_path, "--out", str(out), "--logs", str(logs_dir), "--launch", "--real-weights"]
    argv += ["--golden", REFERENCE_GOLDEN, "--parallel", "3", "--timeout", f"{timeout_s:g}", "--budget-s", f"{budget_s:g}"]
    argv += ["--backends", "auto", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION", "FLASHINFER"]
    if space_name:
        argv += ["--space", space_name]
    if only:
        argv += ["--combos", ",".join(_combo_text(r.params) for r in only) + ",auto:auto"]
    with contextlib.redirect_stdout(sys.stderr):  # its progress lines must not mix into --json output
        code = vllm_features_main(argv)
    if not out.exists():
        raise ProbeError(f"vLLM feature probes wrote no results (exit {code}); logs in {logs_dir}")
    return [ProbeResult.model_validate(r) for r in json.loads(out.read_text())["results"]]


def _combo_text(params: dict[str, Scalar]) -> str:
    """A launch cell's params as vllm_features' --combos item: KV:BACKEND[:K]."""
    text = f"{params.get('kv_cache_dtype') or 'auto'}:{params.get('attention_backend') or 'auto'}"
    return text + (f":{params['draft_k']}" if params.get("draft_k") else "")


def run_engine_probes(
    engine_name: str,
    model_path: str,
    timeout_s: float,
    budget_s: float,
    logs_dir: Path,
    space_name: str | None = None,
    stored: list[ProbeResult] | None = None,
) -> list[ProbeResult]:
    """Launch the engine's probe cells; with `stored` (a resume), only the cells it left untested."""
    from probes.launch_order import settled

    leftover = [r for r in stored or [] if r.status == "untested" and r.params]
    if engine_name == "llamacpp":
        from probes.llamacpp_features import probe_llamacpp

        space = load_space(space_name) if space_name else None
        return probe_llamacpp(model_path, timeout_s=timeout_s, budget_s=budget_s, space=space,
                              settled=settled(stored or []))
    if engine_name == "vllm":
        return vllm_probes(model_path, timeout_s, logs_dir, budget_s, space_name, only=leftover or None)
    raise ConfigError(f"no feature probes for engine {engine_name!r}")


def untested_cells(results: list[ProbeResult]) -> list[ProbeResult]:
    """Engine launch cells left untested (selector and kernel results are not launches)."""
    return [r for r in results if r.status == "untested" and r.params
            and not r.feature.startswith(("selector:", "kernel:"))]


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
    report = {"device": device, "engine": engine.name, "engine_version": engine.version(), "host_key": host_key}
    leftover = untested_cells(stored) if engine_probes else []
    if stored and not refresh and not leftover:
        return ProbeReport(**report, results=stored, reused=True)
    if stored and not refresh:  # resume: launch what an earlier probe left untested, keep the rest
        assert model.path
        store.save_probe_results(
            host_key, run_engine_probes(engine.name, model.path, timeout_s, budget_s, logs_dir, space_name, stored)
        )
        after = store.probe_results(host_key)
        return ProbeReport(**report, results=after, reused=True, resumed=len(leftover) - len(untested_cells(after)))
    from probes.kernels import run_kernel_probes

    results = run_kernel_probes(timeout_s=min(timeout_s, 180.0))
    if engine_probes:
        assert model.path
        results += run_engine_probes(engine.name, model.path, timeout_s, budget_s, logs_dir, space_name)
    store.save_probe_results(host_key, results)
    return ProbeReport(**report, results=results)

