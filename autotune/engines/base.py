"""The engine interface. An engine turns a Candidate into a launch and reads its own logs.

Lifecycle: the study asks `check_available()` once, `validate_space()` when a space is loaded,
then per trial `render()` -> a launcher starts it -> on failure `classify(log)`; on success
`selected(log)` says what the engine really picked. The study never builds command lines itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import ClassVar, Protocol

from autotune.errors import ConfigError
from autotune.models import (
    Candidate,
    ChoicesCheck,
    ChoicesStatus,
    Cluster,
    FailureInfo,
    LaunchSpec,
    ModelSpec,
    ProbeResult,
    SYNTHETIC_ACCEPTANCE_WHY,
    ReadyRequest,
    ResolvedEngine,
    Scalar,
    SearchSpace,
    synthetic_acceptance,
)
from autotune.engines.signatures import classify


#: the prompt of the generation check (any tokenizer has a token for it)
READY_PROMPT = "The"


def ready_request(model: ModelSpec) -> ReadyRequest:
    """The one-token greedy generation an engine must answer before it counts as up."""
    body = {"model": model.served_name or model.name, "prompt": READY_PROMPT, "max_tokens": 1, "temperature": 0.0}
    return ReadyRequest(path="/v1/completions", body=body)


class Knobs:
    """Knob values by name: a candidate's over the space's fixed ones; None = the engine's default."""

    def __init__(self, values: Mapping[str, Scalar]) -> None:
        self.values: dict[str, Scalar] = dict(values)

    def get(self, name: str) -> Scalar:
        return self.values.get(name)

    def number(self, name: str) -> float | None:
        value = self.values.get(name)
        if value is None or isinstance(value, bool):
            return None
        if not isinstance(value, (int, float)):
            raise ConfigError(f"{name} must be a number, got {value!r}")
        return float(value)


class PlanNotes(Protocol):
    """Where an estimate says what it assumed and which terms it could not know."""

    def assume(self, text: str) -> None: ...

    def missing(self, term: str, why: str) -> None: ...


def acceptance_length(before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
    """Mean tokens per draft step between two readings of `Engine.spec_decode_counters`:
    1 + Δaccepted / Δdrafts; None when no draft was made (or the engine counts none)."""
    if "drafts" not in after or "accepted" not in after:
        return None
    drafts = after["drafts"] - before.get("drafts", 0.0)
    if drafts <= 0:
        return None
    return 1.0 + (after["accepted"] - before.get("accepted", 0.0)) / drafts


def acceptance_rate(before: Mapping[str, float], after: Mapping[str, float]) -> float | None:
    """Accepted share of the drafted tokens: Δaccepted / Δdraft_tokens; None when none was drafted."""
    if "draft_tokens" not in after or "accepted" not in after:
        return None
    drafted = after["draft_tokens"] - before.get("draft_tokens", 0.0)
    if drafted <= 0:
        return None
    return (after["accepted"] - before.get("accepted", 0.0)) / drafted


@dataclass(frozen=True)
class ProbeRequest:
    """What `autotune probe` asks an engine's feature probes for."""

    model_path: str
    timeout_s: float  # for one launch to become healthy
    budget_s: float  # no launch starts after this many seconds
    logs_dir: Path
    space_name: str | None = None  # launch first what this space uses
    stored: tuple[ProbeResult, ...] = ()  # a resume: what an earlier probe stored for this host
    host_key: str | None = None  # the host fingerprint the engine's choices are cached under


class Engine(ABC):
    name: ClassVar[str]
    #: knob names this engine can render; a space naming another knob is refused.
    knobs: ClassVar[frozenset[str]]
    #: the knob that sets the context length a launch holds
    context_knob: ClassVar[str]
    #: launch settings that make a smoke launch fast (isolation; only for knobs not under test)
    cheap_params: ClassVar[Mapping[str, Scalar]] = {}
    #: the speculation method drafting uses when the space names none (None = it must be named)
    default_spec_method: ClassVar[str | None] = None
    #: whether it needs a GPU (a generic space of an engine that does not suits a CPU-only host)
    needs_gpu: ClassVar[bool] = True
    #: seconds a launch takes to become healthy, before any was measured (forecasts only)
    startup_guess_s: ClassVar[float] = 60.0
    #: the study's default for deferring the gates of a faster trial to one relaunch of the final
    #: best (autotune.study.deferred): right where a relaunch costs seconds, not where it costs minutes
    gates_at_end: ClassVar[bool] = False
    health_path: ClassVar[str] = "/v1/models"
    #: the engine's Prometheus endpoint, if it has one (spec-decode counters live there).
    metrics_path: ClassVar[str | None] = None
    #: POST endpoint that tokenizes text with the served model's tokenizer.
    tokenize_path: ClassVar[str] = "/tokenize"

    #: "module:function" of this engine's feature probes (registered by name, like the engines:
    #: the probes import the engine, not the other way round); None = it has none
    feature_probes_entry: ClassVar[str | None] = None

    #: knob -> flag for plugin/fork options this module does not know (set from the space)
    plugin_flags: dict[str, str] = {}

    def use_space(self, space: SearchSpace) -> Engine:
        """Validate the space for this engine and take its plugin flags; returns self."""
        self.validate_space(space)
        self.plugin_flags = dict(space.plugin_flags)
        return self

    @abstractmethod
    def version(self) -> str | None:
        """The installed engine's version, or None when it is not installed."""

    @abstractmethod
    def check_available(self) -> None:
        """Raise EngineUnavailable with an install hint when the engine cannot run here."""

    @abstractmethod
    def render(self, candidate: Candidate, model: ModelSpec, port: int, host: str = "127.0.0.1") -> LaunchSpec:
        """The exact argv + env that serve `candidate` on `host:port`."""

    def render_cluster(self, candidate: Candidate, model: ModelSpec, port: int, cluster: Cluster) -> LaunchSpec:
        """The launch over several boxes (one NodeLaunch per process); engines without a
        distributed executor cannot."""
        nodes = len(cluster.nodes)
        if nodes == 1:
            raise ConfigError(
                f"engine {self.name!r} has no distributed executor, so --launcher ray (a Ray cluster, one node "
                "too) cannot run it; use --launcher process or docker"
            )
        raise ConfigError(f"engine {self.name!r} has no distributed executor: it cannot run across {nodes} nodes; use --nodes 1")

    def preflight(self, space: SearchSpace) -> None:
        """Checks against the installed engine before any launch (e.g. flag names); raise
        ConfigError when the space asks for something this engine version does not have."""

    def check_values(self, space: SearchSpace, host_key: str) -> ChoicesCheck:
        """Hold every knob value of `space` against what the installed engine accepts (read from
        the engine, cached per version and host fingerprint `host_key`); raise ConfigError naming
        the value, the knob, the version and its choices. Knobs marked `unlisted: leave_out` lose
        what it does not list instead: the check's `left_out`, which `ChoicesCheck.kept` applies. An
        engine that cannot be asked says so in the returned check and nothing is refused."""
        return ChoicesCheck(status=ChoicesStatus.NOTHING_TO_CHECK, engine=self.name, engine_version=self.version())

    def plugin_args(self, params: dict[str, Scalar]) -> list[str]:
        """FLAG VALUE for every plugin knob the candidate sets (None = left out)."""
        args: list[str] = []
        for knob, flag in sorted(self.plugin_flags.items()):
            value = params.get(knob)
            if value is not None:
                args += [flag, str(value).lower() if isinstance(value, bool) else str(value)]
        return args

    def environment_fix(self, failure: FailureInfo) -> str | None:
        """What to do about `failure` when every candidate failed with it (no knob explains it), where
        this engine knows a cause on this host (e.g. a build that does not suit its CPU); None
        when it knows none."""
        return None

    def classify(self, log_text: str) -> FailureInfo | None:
        """The failure this log shows, from the shared signature table; None when it shows none."""
        return classify(log_text, engine=self.name)

    def feature_probes(self, request: ProbeRequest) -> list[ProbeResult]:
        """Launch this engine's probe cells on this host (what works, with evidence), within the
        request's budget, what the space uses first; on a resume only the cells an earlier probe
        left untested."""
        if self.feature_probes_entry is None:
            raise ConfigError(f"no feature probes for engine {self.name!r}")
        module, _, function = self.feature_probes_entry.partition(":")
        return getattr(import_module(module), function)(self, request)

    def selected(self, log_text: str) -> dict[str, str]:
        """What the engine reports it actually used (backends, cache types); engine-specific."""
        return {}

    def resolved(self, log_text: str) -> ResolvedEngine | None:
        """What the engine resolved at start and logged (version, batch limit, backends, graphs,
        KV cache size); None when its log states none of them."""
        return None

    def start_parts(self, log_text: str) -> dict[str, float]:
        """Seconds of the start the engine's log accounts for (weights, compile, ...); engine-specific."""
        return {}

    def spec_decode_counters(self, metrics_text: str) -> dict[str, float]:
        """Speculative-decoding counters from the metrics endpoint (drafts, draft_tokens, accepted)."""
        return {}

    # ------------------------------------------------------------------ what the planner asks

    @abstractmethod
    def kv_element_bytes(self, params: Knobs, model_dtype_bits: float | None, notes: PlanNotes) -> float | None:
        """Bytes per cached K or V element for these settings (K and V averaged where they
        differ); None, with a note, when the setting is not in the engine's table."""

    @abstractmethod
    def memory_overhead(self, params: Knobs) -> tuple[float, float]:
        """(fixed GB per GPU beyond weights and KV, tokens batched per forward step at the peak)."""

    def memory_budget_gb(self, params: Knobs, gpu_memory_gb: float) -> float | None:
        """The memory the engine grabs at start (its KV pool is what is left); None = it takes
        what it needs."""
        return None

    def eager(self, params: Knobs) -> bool:
        """Whether each decode step runs without captured graphs (its fixed step cost differs)."""
        return False

    def cuda_graphs(self, params: Knobs) -> bool:
        """Whether these settings replay captured CUDA graphs (collectives inside them, across nodes)."""
        return False

    def decode_threads(self, params: Knobs, cpu_cores: int) -> int | None:
        """CPU threads one decode step runs on (None: not a CPU engine, no thread term)."""
        return None

    def max_batch(self, params: Knobs) -> int | None:
        """The most requests one decode step batches under these settings (None: no cap the planner knows)."""
        return None

    def spec_method(self, params: Knobs) -> str | None:
        """The speculation method these settings draft with (None when they name none)."""
        method = params.get("spec_method")
        return str(method) if method is not None else self.default_spec_method

    def validate_space(self, space: SearchSpace) -> None:
        """Refuse synthetic speculative acceptance (it measures no real drafting), then knobs this
        engine cannot render, with the list of the ones it can."""
        settings = [*space.fixed.items(), *space.env.items(),
                    *((k.name, v) for k in space.knobs for v in k.values)]
        found = next((f for name, value in settings if (f := synthetic_acceptance(name, value))), None)
        if found:
            raise ConfigError(f"space {space.name!r}: {found} {SYNTHETIC_ACCEPTANCE_WHY}")
        named = {k.name for k in space.knobs if k.kind == "arg"} | set(space.fixed)
        unknown = sorted(named - self.knobs - set(space.plugin_flags))
        if unknown:
            raise ConfigError(
                f"engine {self.name!r} has no knob {', '.join(map(repr, unknown))}; "
                f"known knobs: {', '.join(sorted(self.knobs))}"
            )
