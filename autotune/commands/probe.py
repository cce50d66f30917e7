"""`autotune probe`: identity, kernel micro-probes and engine feature probes, stored per host
fingerprint in runs.db and reused until --refresh. `autotune search` prunes with the same rows.

Kernel probes are the program autotune/probe/programs/kernels.py, one process each; engine feature probes are the
engine's own (`Engine.feature_probes`). Engine launches run in the order of
autotune/probe/order.py (what the space uses first) within the time budget; cells left untested
are launched by the next `autotune probe` (it resumes from runs.db, like a study)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from autotune.commands.setup import on_this_host, others_on_gpus, read_space
from autotune.engines import ProbeRequest
from autotune.errors import ConfigError
from autotune.checkpoint.files import resolve_model
from autotune.models import FailureInfo, GpuHolder, ProbeReport, ProbeResult
from autotune.probe.runner import probe_names, python_module_argv, run_probe_subprocess
from autotune.engines.signatures import classify
from autotune.store import Store, check_writable

KERNEL_PROGRAM = "autotune.probe.programs.kernels"


def classify_log(path: Path) -> FailureInfo | None:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError(f"cannot read log {path}: {exc.strerror}") from exc
    return classify(text)


def run_kernel_probes(timeout_s: float = 120, names: list[str] | None = None) -> list[ProbeResult]:
    """Every kernel probe of the program autotune/probe/programs/kernels.py (or `names`), each in its own subprocess."""
    known = probe_names(KERNEL_PROGRAM)
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise ConfigError(f"unknown kernel probe {', '.join(unknown)}; known: {', '.join(known)}")
    return [
        run_probe_subprocess(python_module_argv(KERNEL_PROGRAM, name), f"kernel:{name}", timeout_s)
        for name in (names or known)
    ]


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
    on_holders: Callable[[list[GpuHolder]], None] = lambda held: None,
) -> ProbeReport:
    """`on_holders` hears, before the first engine launch, which other processes hold this host's GPUs."""
    space, engine = read_space(space_name)
    model = resolve_model(space.model, model_path) if engine_probes else space.model
    if engine_probes:
        engine.check_available()
    check_writable(db_path)
    here = on_this_host(space, engine, values=engine_probes)  # a value this engine version refuses: exit 2 here
    store = Store(db_path)
    host_key = store.save_host(here.host)
    stored = store.probe_results(host_key)
    report = {"device": here.device, "engine": engine.name, "engine_version": engine.version(), "host_key": host_key}
    leftover = untested_cells(stored) if engine_probes else []
    if stored and not refresh and not leftover:
        return ProbeReport(**report, results=stored, reused=True)
    if engine_probes:
        on_holders(others_on_gpus(engine))
    if stored and not refresh:  # resume: launch what an earlier probe left untested, keep the rest
        assert model.path
        request = ProbeRequest(model.path, timeout_s, budget_s, logs_dir, space_name, stored=tuple(stored),
                               host_key=host_key)
        store.save_probe_results(host_key, engine.feature_probes(request))
        after = store.probe_results(host_key)
        return ProbeReport(**report, results=after, reused=True, resumed=len(leftover) - len(untested_cells(after)))
    results = run_kernel_probes(timeout_s=min(timeout_s, 180.0))
    if engine_probes:
        assert model.path
        results += engine.feature_probes(ProbeRequest(model.path, timeout_s, budget_s, logs_dir, space_name,
                                                      host_key=host_key))
    store.save_probe_results(host_key, results)
    return ProbeReport(**report, results=results)
