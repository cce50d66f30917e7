"""The planner's predictions per candidate and the plan report."""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from autotune.models.base import Record
from autotune.models.host import ChoicesCheck
from autotune.models.launch import LaunchSpec


class DecodeBound(str, Enum):
    """The term of the planner's one-stream decode step that takes the most time: what a change must
    shrink to be faster (fp8 weights help a weights-bound step, not one bound by step overhead)."""

    WEIGHTS = "weights"  # streaming the weights read per token from memory
    KV_READ = "kv_read"  # reading the KV cache at the mean decode context
    COMMUNICATION = "communication"  # tensor-parallel all-reduces
    STEP_OVERHEAD = "step_overhead"  # the fixed per-step time (scheduling, launches, sampling)
    COMPUTE = "compute"  # the step's FLOPs at the profile's peak; not part of the step time (see decode_terms_ms)
    STREAM_OVERHEAD = "stream_overhead"  # batch > 1: the time each added stream costs a step

    def __str__(self) -> str:
        return self.value


class BatchLimit(str, Enum):
    """What sets the batch a wave of N requests decodes at."""

    REQUESTS = "requests"  # all N decode together
    ENGINE = "engine"  # the engine's cap: vLLM max_num_seqs, llama.cpp's one request at a time
    KV_POOL = "kv_pool"  # the KV pool holds fewer than N requests

    def __str__(self) -> str:
        return self.value


class WaveEstimate(Record):
    """The planner's prediction for one wave of N concurrent requests."""

    batch: int = Field(description="streams decoded per step: N, or fewer where the engine or the KV pool caps it "
                       "(the rest queue, so output does not grow past the batch's)")
    limit: BatchLimit
    step_ms: float = Field(description="one decode step at the batch: the larger of weights + batch x KV read + "
                           "communication + step overhead + (batch - 1) x stream overhead, and the batch's FLOPs at peak")
    bound: DecodeBound = Field(description="compute when the FLOPs take longer than the sum, else its largest term")
    output_tps: float = Field(description="batch / step: aggregate output tok/s (no speculative gain at batch > 1)")


class StreamsEstimate(Record):
    """What the planner predicts for N concurrent streams: the capacity bound and each wave."""

    pool_streams: int | None = Field(
        None, description="the capacity bound: requests the memory-fit KV pool holds at the planner's request "
        "length (DECODE_PROMPT_TOKENS + decode_max_tokens); None when the pool is unknown",
    )
    waves: dict[int, WaveEstimate] = Field(default_factory=dict, description="per level N >= 2 of workload.concurrency")


class PlanEstimate(Record):
    """What the planner predicts for one candidate. Memory in GB (1e9 bytes) per GPU, which is per
    node on one-GPU boxes."""

    candidate_key: str
    label: str
    tp: int
    pp: int
    weights_gb: float | None
    kv_gb: float | None
    overhead_gb: float
    total_gb: float
    usable_gb: float = Field(description="GPU memory (unified: node memory) less the OS reserve: what must hold total_gb")
    engine_budget_gb: float | None = Field(
        None, description="vLLM: gpu_memory_utilization x GPU memory, what the KV pool is carved from "
        "(pool = budget - weights - overhead); the plan table's usable column shows it where it is set",
    )
    kv_pool_tokens: int | None = None
    fits: bool
    reason: str | None = None
    decode_tps: float | None = None
    prefill_tps: float | None = None
    spec_gain: float | None = None
    decode_bound: DecodeBound | None = Field(None, description="the largest term of the decode step")
    decode_terms_ms: dict[DecodeBound, float] = Field(
        default_factory=dict,
        description="ms per target step of each term; the step is weights + kv_read + communication + "
        "step_overhead (compute is shown beside it: the roofline counts bytes, so a compute-bound step "
        "makes decode_tps an upper bound)",
    )
    streams: StreamsEstimate | None = Field(
        None, description="set when the workload has concurrency levels >= 2 or the objective is capacity_at_slo "
        "(left out of the JSON otherwise)",
    )
    unknown: list[str] = []
    assumptions: list[str] = []

    @model_serializer(mode="wrap")
    def _without_unset_streams(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        if self.streams is None:
            out.pop("streams", None)
        return out

    def predicted(self) -> dict[str, float]:
        """The numbers a TrialResult keeps under `predicted`."""
        out = {"memory_gb": self.total_gb}
        if self.decode_tps is not None:
            out["decode_tps"] = self.decode_tps
        if self.prefill_tps is not None:
            out["prefill_tps"] = self.prefill_tps
        for level, wave in (self.streams.waves if self.streams else {}).items():
            out[f"output_tps_c{level}"] = wave.output_tps
        return out

    def output_tps_at(self, level: int) -> float | None:
        """Predicted output tok/s of a wave of `level` streams (None when not estimated)."""
        wave = self.streams.waves.get(level) if self.streams else None
        return wave.output_tps if wave else None


class PlanReport(Record):
    """Kept candidates by predicted decode (fastest first), dropped ones with reasons.
   """

    space: str
    hardware: str
    nodes: int
    gpus_per_node: int | None = Field(None, description="GPUs of one node the plan is for (0: a CPU host)")
    memory_gb_per_gpu: float | None = Field(None, description="memory per GPU (CPU host: per node) the plan used, GB")
    detected_on: str | None = Field(None, description="set when the GPU count and memory are this host's")
    kept: list[PlanEstimate]
    dropped: list[PlanEstimate]
    launch: LaunchSpec | None = Field(None, description="the best-predicted candidate's launch, per node")
    hosts_note: str | None = Field(None, description="set when the launch is rendered for placeholder hosts")
    choices: ChoicesCheck | None = Field(None, description="the knob values against the installed engine's choices")
