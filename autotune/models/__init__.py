"""The records that flow through autotune, each defined once, one module per family of records.
May import nothing else of autotune: pydantic and the standard library only.

Candidate (an engine config) -> TrialResult (what a trial measured) -> Recipe (the exported winner).
Everything else takes and returns these. Units live in field names (`ttft_ms`, `decode_tps`).

The families, each importing only those before it: base (Checked, Strict, Record), space, cluster,
launch, measurement, energy, trial, host, plan, recipe. Outside this package, import them from here.
"""

from autotune.models.base import Checked, Record, Scalar, Strict, utc_now, utc_now_ms
from autotune.models.space import (
    CAPACITY_OBJECTIVE, DECODE_OBJECTIVES, ENERGY_OBJECTIVE, METRIC_FAMILIES, WEIGHTED_OBJECTIVE,
    WORKLOAD_PATTERN, Better, GatePolicy, Gates, HardwareProfile, KnobSpec, KnownFailure, ModelSpec, NeedleConfig,
    Objective, QevalConfig, Quantity, Rule, SearchSpace, Slo, SpaceObjective, WeightedTerm, Workload,
    measured_families, objective_workload, tps_measurement, tps_objective, all_good_floor,
)
from autotune.models.cluster import (
    CONTAINER_HF_CACHE, CONTAINER_JIT_CACHE_ENV, CONTAINER_VLLM_CACHE, DEFAULT_COMPILE_CACHE, Cluster, ClusterNode,
)
from autotune.models.launch import (
    SYNTHETIC_ACCEPTANCE_WHY, Candidate, GenerationCheck, GenerationOutcome, LaunchSpec, NcclLibrary,
    NcclReading, NcclSource, NodeLaunch, ReadyRequest, synthetic_acceptance, synthetic_in_argv,
)
from autotune.models.measurement import (
    CapacityReport, CheckKind, GateOutcome, GateStatus, LevelResult, LevelVerdict, McNemarResult, Measurement,
    NeedleCase, NeedleReport, QevalReport, QevalTask, RequestResult, SearchStop, mad,
)
from autotune.models.energy import (
    NOT_DECODE_WORKLOADS, THROTTLE_EVENTS, ClockEvent, EnergyMethod, EnergyReading, GpuState, GpuStateFlag,
    NodeEnergy, TrialEnergy, WorkloadEnergy,
)
from autotune.models.trial import (
    AcceptanceSource, AccuracyFailure, ClassAttempt, ClassIsolation, Confirmation, ConfirmationLaunch,
    EnvironmentFailure, FailedClass, FailureCause, FailureInfo, LearnedFailure, ResolvedEngine, TrialResult,
    TrialStatus, VerdictStatus,
)
from autotune.models.host import (
    ChoicesCheck, ChoicesStatus, DeviceIdentity, GpuHolder, GpuIdentity, HostFingerprint, LeftOutKnob, ProbeReport,
    ProbeResult, ProbeStatus,
)
from autotune.models.plan import (
    BatchLimit, DecodeBound, PlanEstimate, PlanReport, StreamsEstimate, WaveEstimate,
)
from autotune.models.recipe import (
    SCHEDULE_KEY, SCHEDULE_OPEN_END, DraftSchedule, DraftScheduleReport, DraftStep, Provenance, Recipe,
    RecipeNumber, RecipeVerdict, ScheduleLevel, ScheduleStatus, TradeOff,
)
