"""`autotune probe`: identity, kernel micro-probes and engine feature probes, stored per host
fingerprint in runs.db and reused until --refresh. `autotune search` prunes with the same rows."""

from __future__ import annotations

from pathlib import Path

from autotune.engines import get_engine
from autotune.errors import ConfigError
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


def run_engine_probes(engine_name: str, model_path: str, timeout_s: float) -> list[ProbeResult]:
    if engine_name == "llamacpp":
        from probes.llamacpp_features import probe_llamacpp

        return probe_llamacpp(model_path, timeout_s=timeout_s)
    if engine_name == "vllm":
        from probes.vllm_features import probe_vllm

        return probe_vllm(model_path, timeout_s=timeout_s)
    raise ConfigError(f"no feature probes for engine {engine_name!r}")


def probe(
    *,
    db_path: Path,
    space_name: str,
    model_path: str | None,
    refresh: bool,
    engine_probes: bool = True,
    timeout_s: float = 300.0,
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
        results += run_engine_probes(engine.name, model.path, timeout_s)
    store.save_probe_results(host_key, results)
    return ProbeReport(device=device, engine=engine.name, engine_version=engine.version(), host_key=host_key, results=results)

