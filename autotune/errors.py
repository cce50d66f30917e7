"""One error family. The CLI maps each class to its exit code and prints the message alone."""

from __future__ import annotations


class AutotuneError(Exception):
    """Base of every error autotune raises on purpose; the message says what to do next."""

    exit_code = 1


class ConfigError(AutotuneError):
    """Bad input: a malformed search space, an unknown knob or engine, an impossible option."""

    exit_code = 2


class ModelNotFound(ConfigError):
    """The model file or directory named by the space does not exist."""


class NoValidCandidate(ConfigError):
    """Every candidate of the space is ruled out before launching."""


class EngineUnavailable(AutotuneError):
    """The engine (or a package it needs) is not installed or cannot run here."""

    exit_code = 3


class EnvironmentFailed(AutotuneError):
    """A study gave no answer because of its environment: every candidate failed for a cause no knob
    explains (named, with its fix where known), or no launch got its engine to serve."""

    exit_code = 3


class EnergyUnavailable(AutotuneError):
    """The space ranks by energy (objective tokens_per_joule, speed_energy) and this host has no GPU energy to read."""

    exit_code = 3


class ProbeError(AutotuneError):
    """The probing infrastructure itself broke (not a feature failing: that is data)."""

    exit_code = 3


class StoreError(AutotuneError):
    """runs.db cannot be opened, created or written."""

    exit_code = 2


class StudyBusy(AutotuneError):
    """Another autotune process owns the study (one process per study at a time)."""

    exit_code = 4


class EngineStartError(AutotuneError):
    """An engine process did not become healthy; carries the log tail for classification."""

    def __init__(
        self, message: str, log_tail: str = "", timed_out: bool = False, stalled: bool = False,
        evidence: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.log_tail = log_tail
        self.timed_out = timed_out
        #: its health endpoint answered but no one-token generation came back (engine_stalled)
        self.stalled = stalled
        self.evidence = evidence or []
