"""The engine interface. An engine turns a Candidate into a launch and reads its own logs.

Lifecycle: the study asks `check_available()` once, `validate_space()` when a space is loaded,
then per trial `render()` -> a launcher starts it -> on failure `classify(log)`; on success
`selected(log)` says what the engine really picked. The study never builds command lines itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from importlib import import_module
from pathlib import Path
from typing import ClassVar

from autotune.errors import ConfigError
from autotune.models import (
    Candidate,
    Cluster,
    FailureInfo,
    LaunchSpec,
    ModelSpec,
    ProbeResult,
    Scalar,
    SearchSpace,
)
from autotune.signatures import classify


class Engine(ABC):
    name: ClassVar[str]
    #: knob names this engine can render; a space naming another knob is refused.
    knobs: ClassVar[frozenset[str]]
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
        raise ConfigError(f"engine {self.name!r} cannot run across {len(cluster.nodes)} nodes")

    def preflight(self, space: SearchSpace) -> None:
        """Checks against the installed engine before any launch (e.g. flag names); raise
        ConfigError when the space asks for something this engine version does not have."""

    def plugin_args(self, params: dict[str, Scalar]) -> list[str]:
        """FLAG VALUE for every plugin knob the candidate sets (None = left out)."""
        args: list[str] = []
        for knob, flag in sorted(self.plugin_flags.items()):
            value = params.get(knob)
            if value is not None:
                args += [flag, str(value).lower() if isinstance(value, bool) else str(value)]
        return args

    def classify(self, log_text: str) -> FailureInfo | None:
        """The failure this log shows, from the shared signature table; None when it shows none."""
        return classify(log_text, engine=self.name)

    def feature_probes(
        self,
        model_path: str,
        *,
        timeout_s: float,
        budget_s: float,
        logs_dir: Path,
        space_name: str | None = None,
        stored: list[ProbeResult] | None = None,
    ) -> list[ProbeResult]:
        """Launch this engine's probe cells on this host (what works, with evidence), within
        `budget_s`, what the space uses first; with `stored` (a resume), only the cells an
        earlier probe left untested."""
        if self.feature_probes_entry is None:
            raise ConfigError(f"no feature probes for engine {self.name!r}")
        module, _, function = self.feature_probes_entry.partition(":")
        return getattr(import_module(module), function)(
            self, model_path, timeout_s=timeout_s, budget_s=budget_s, logs_dir=logs_dir,
            space_name=space_name, stored=list(stored or []),
        )

    def selected(self, log_text: str) -> dict[str, str]:
        """What the engine reports it actually used (backends, cache types); engine-specific."""
        return {}

    def spec_decode_counters(self, metrics_text: str) -> dict[str, float]:
        """Speculative-decoding counters from the metrics endpoint (drafts, draft_tokens, accepted)."""
        return {}

    def validate_space(self, space: SearchSpace) -> None:
        """Refuse knobs this engine cannot render, with the list of the ones it can."""
        named = {k.name for k in space.knobs if k.kind == "arg"} | set(space.fixed)
        unknown = sorted(named - self.knobs - set(space.plugin_flags))
        if unknown:
            raise ConfigError(
                f"engine {self.name!r} has no knob {', '.join(map(repr, unknown))}; "
                f"known knobs: {', '.join(sorted(self.knobs))}"
            )
