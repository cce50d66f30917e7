"""A candidate and its launch: argv and environment per node, the generation check that says an
engine is up, the NCCL each node loads, and the speculative settings a launch may not fake."""

from __future__ import annotations

import hashlib
import json
from enum import Enum
from typing import Any, Literal

from pydantic import Field

from autotune.models.base import Record, Scalar

#: why a launch that fakes speculative acceptance is refused (vLLM's `rejection_sample_method:
#: synthetic`, with `synthetic_acceptance_length` / `synthetic_acceptance_rates`; published recipes use it)
SYNTHETIC_ACCEPTANCE_WHY = (
    "sets synthetic speculative acceptance: drafts are accepted at a set rate instead of being verified by "
    "the target model, so the speed it yields measures no real drafting; remove it"
)


def synthetic_acceptance(name: str, value: object) -> str | None:
    """The synthetic-acceptance setting that `name: value` makes, searched inside a JSON object (a
    `--speculative-config` value) or mapping too, as "key: value"; None when it makes none."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, dict):
        return next((found for k, v in value.items() if (found := synthetic_acceptance(str(k), v))), None)
    key = name.lower().lstrip("-").replace("-", "_")
    faked = isinstance(value, str) and value.lower() == "synthetic" and ("sample" in key or "accept" in key)
    return f"{name}: {value}" if "synthetic" in key or faked else None


def synthetic_in_argv(argv: list[str]) -> str | None:
    """The synthetic-acceptance setting an argv passes (`--flag VALUE` or `--flag=VALUE`), or None."""
    for i, arg in enumerate(argv):
        flag, sep, value = arg.partition("=")
        if not flag.startswith("-"):
            continue
        found = synthetic_acceptance(flag, value if sep else (argv[i + 1] if i + 1 < len(argv) else ""))
        if found:
            return found
    return None


class Candidate(Record):
    """One engine configuration: knob -> value (fixed knobs included)."""

    engine: str
    params: dict[str, Scalar]
    env: dict[str, str] = Field(default_factory=dict)

    def key(self) -> str:
        blob = json.dumps({"engine": self.engine, "params": self.params, "env": self.env}, sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def values(self) -> dict[str, Scalar]:
        """Every knob's value: the environment's, then the engine params' (a knob is one or the other)."""
        return {**self.env, **self.params}

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in sorted(self.params.items()) if v is not None]
        parts += [f"{k}={v}" for k, v in sorted(self.env.items())]
        return " ".join(parts) or "(engine defaults)"


class NodeLaunch(Record):
    """The exact launch of one process on one node: argv list, never a shell string."""

    node: int = 0
    role: Literal["server", "head", "worker"] = "server"
    argv: list[str]
    env: dict[str, str] = Field(default_factory=dict)


class ReadyRequest(Record):
    """The one-token greedy generation that says an engine is up: a health endpoint answering 200
    is not enough (an engine can stop generating while /health still answers)."""

    path: str = "/v1/completions"
    body: dict[str, Any] = Field(description="the JSON posted: the served model, a short prompt, max_tokens 1, temperature 0")


class GenerationOutcome(str, Enum):
    """What one generation check came back with."""

    GENERATED = "generated"
    TIMED_OUT = "timed_out"
    HTTP_ERROR = "http_error"
    NO_TOKEN = "no_token"
    UNREACHABLE = "unreachable"


class GenerationCheck(Record):
    """One one-token greedy generation against a running engine, and what came of it."""

    outcome: GenerationOutcome
    seconds: float
    timeout_s: float
    detail: str = ""

    @property
    def generated(self) -> bool:
        return self.outcome == GenerationOutcome.GENERATED

    def evidence(self, path: str) -> str:
        what = f"POST {path} (1 token, greedy): {self.outcome.value}"
        if self.outcome == GenerationOutcome.TIMED_OUT:
            return f"{what}, no reply within {self.timeout_s:.0f} s"
        return f"{what} after {self.seconds:.1f} s" + (f": {self.detail}" if self.detail else "")


class NcclSource(str, Enum):
    """Where a node's NCCL library comes from."""

    PIP = "pip"  # an nvidia-nccl-cu* wheel in the engine's Python
    SYSTEM = "system"  # libnccl.so.2 of the system (DGX OS: the libnccl2 package)
    OVERRIDE = "override"  # the file VLLM_NCCL_SO_PATH names


class NcclLibrary(Record):
    """One NCCL library found on a node (launchers/nccl.py says how each field is read)."""

    source: NcclSource
    path: str | None = None
    real_path: str | None = Field(None, description="the file its symlinks resolve to")
    package: str | None = Field(None, description="the pip distribution or Debian package it belongs to")
    package_version: str | None = None
    version: str | None = Field(None, description="the library's own version (its compiled-in version string)")
    cuda: str | None = Field(None, description="the CUDA version it was built for")
    build_id: str | None = Field(None, description="its GNU build id: two builds of one version differ here")
    sha256: str | None = Field(None, description="the file's hash, where it has no build id")
    error: str | None = None


class NcclReading(Record):
    """The NCCL libraries of one node before a multi-node launch, and which one the engine loads."""

    node: int
    libraries: list[NcclLibrary] = Field(default_factory=list)
    loaded: NcclSource | None = Field(None, description="the one the engine loads (None: none found)")
    error: str | None = Field(None, description="why nothing could be read")

    def loaded_library(self) -> NcclLibrary | None:
        return next((lib for lib in self.libraries if lib.source == self.loaded and lib.version), None)


class LaunchSpec(Record):
    engine: str
    nodes: list[NodeLaunch]
    port: int
    health_path: str = "/v1/models"
    image: str | None = None
    ready: ReadyRequest | None = Field(
        None, description="the generation that must return before the engine counts as up (None: health alone)"
    )

    @property
    def server(self) -> NodeLaunch:
        """The process that serves HTTP: the `server` entry, else the head node's."""
        return next((n for n in self.nodes if n.role == "server"), None) or next(n for n in self.nodes if n.role == "head")
