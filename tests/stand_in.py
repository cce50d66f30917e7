"""A study of a tiny llama.cpp space whose launches are stand-ins: the plan `autotune search`
would make, with a placeholder model file (the stand-in never reads it), and the stand-in launches
(`StandIn`, `Timed`): Launches of autotune/trial/launch.py that start nothing, held to the same
contract as the engine's by tests/test_launch_contract.py."""

from __future__ import annotations

from pathlib import Path

#: the tiny llama.cpp space: two n_threads values (a str.format template with {model})
TINY_LLAMACPP = (
    "name: tiny\nengine: llamacpp\nmodel: {{name: m, path: {model}}}\n"
    "knobs:\n  - {{name: n_threads, values: [1, 2], default: 1}}\n"
)


def placeholder_gguf(tmp_path: Path) -> Path:
    """A model file that is only its four magic bytes: enough for a space to load and a plan to be
    made, never for an engine to serve."""
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    return model


def tiny_llamacpp_space(tmp_path: Path, template: str = TINY_LLAMACPP) -> Path:
    """tmp_path/s.yaml: the space `template` (a str.format template with {model}) on a placeholder GGUF."""
    space = tmp_path / "s.yaml"
    space.write_text(template.format(model=placeholder_gguf(tmp_path)))
    return space


def stand_in_plan(tmp_path: Path, space_template: str, *, accuracy: bool, tries: list[str] | None = None):
    """The study 's' in tmp_path/runs.db of the space `space_template` (a str.format template with
    {model}); run it with a stand-in launch (`search.run(plan, ..., launch=StandIn())`)."""
    from autotune.commands.setup import prepare

    space = tiny_llamacpp_space(tmp_path, space_template)
    return prepare(space_name=str(space), model_path=None, db_path=tmp_path / "runs.db", study="s",
                   hardware="cpu", nodes=1, accuracy=accuracy, logs_dir=tmp_path, tries=tries)


# ---------------------------------------------------------------- stand-in launches

def threads_value(request) -> float:
    """A stand-in's default objective: 10 tok/s per thread (n_threads), a little more with flash attention."""
    params = request.candidate.params
    return 10.0 * int(params.get("n_threads", 1)) + (1.0 if params.get("flash_attn") else 0.0)


class StandIn:
    """A Launch (autotune/trial/launch.py) that starts nothing: a launch of a request measures
    `value(request)` (one decode measurement of two equal samples) in `phases(request)` seconds, or
    fails with `fails(request)`; its gates are what the request says they are (`LaunchRequest.gates`),
    with the reports `needle(request)` and `qeval(request)` where they run. `requests` and
    `results` keep every launch, in order."""

    def __init__(self, value=threads_value, *, fails=lambda request: None, phases=lambda request: {},
                 needle=lambda request: None, qeval=lambda request: None, duration_s: float = 1.0) -> None:
        self.value, self.fails, self.phases = value, fails, phases
        self.needle, self.qeval, self.duration_s = needle, qeval, duration_s
        self.requests: list = []
        self.results: list = []

    def __call__(self, request):
        from autotune.models import Measurement, TrialResult

        self.requests.append(request)
        phases = dict(self.phases(request))
        common = {"study": request.ctx.study, "number": request.number, "candidate": request.candidate,
                  "duration_s": sum(phases.values()) or self.duration_s, "phase_s": phases}
        failure = self.fails(request)
        if failure is not None:
            result = TrialResult(status="failed", reason=failure.message, failure=failure, **common)
        else:
            value = self.value(request)
            decode = Measurement.of("decode_tps.prose", "tok/s", "1 stream", [value, value])
            measured = TrialResult(status="ok", objective=value, score=value, measurements=[decode], **common)
            gates = request.gates(lambda: (value, value))
            result = measured.model_copy(update=gates.fields(
                self.needle(request) if gates.needle else None, self.qeval(request) if gates.qeval else None))
        self.results.append(result)
        return result

    def stop_all(self) -> None:
        pass

    def of(self, *purposes) -> list:
        """The requests of these purposes, in order."""
        return [r for r in self.requests if r.purpose in purposes]


class Timed(StandIn):
    """A stand-in launch that takes `seconds(candidate)` of wall time (trials side by side) and
    counts how many run at once (`most`)."""

    def __init__(self, seconds, fails=lambda candidate: None) -> None:
        import threading

        super().__init__(lambda request: 10.0 * int(request.candidate.params["n_threads"]),
                         fails=lambda request: fails(request.candidate))
        self.seconds = seconds
        self.lock = threading.Lock()
        self.now = self.most = 0

    def __call__(self, request):
        import time

        from autotune.models import utc_now_ms

        started, t0 = utc_now_ms(), time.monotonic()
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        request.events("decode")
        time.sleep(self.seconds(request.candidate))
        with self.lock:
            self.now -= 1
        result = super().__call__(request)
        return result.model_copy(update={"started_at": started, "duration_s": time.monotonic() - t0})
