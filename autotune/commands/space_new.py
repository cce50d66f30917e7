"""`autotune space new`: a search space for your own model, written from its config.json.

Read by the one reader of a checkpoint's config (`autotune.checkpoint.config`: transformers' config
class where it has one, else the JSON with every assumption named) and counted by
`autotune.checkpoint.params` (on the meta device where torch and transformers are installed, else the
closed form); the checkpoint's `quantization_config` is read here.

Decided, each decision written into the YAML's header with its reason:
- parameter counts (total, read per token, vision tower and MTP layers apart), how they were
  counted, and bits per weight from the checkpoint's format: the planner's memory and roofline inputs;
- the layout: tensor parallel over every GPU, or `--layout TPxPP`; a TP that cannot split the
  heads is refused with the layouts (and box counts) that can;
- the knobs that apply to this architecture on this hardware: KV dtype, attention backend,
  online FP8 for a 16-bit checkpoint, speculative decoding (the model's MTP heads, else n-gram
  lookup), concurrent sequences;
- the memory fit: the longest `max_model_len` of MAX_MODEL_LENS at which the baseline fits on
  every node; a 16-bit checkpoint that fits nowhere is quantized online to fp8 when that fits;
  a model that fits in neither form is refused;
- Spark seed-recipe settings in `fixed` (as in search_spaces/minimax-m3.1-flash-spark4.yaml): TP
  over the boxes, gpu_memory_utilization 0.80, Marlin MoE for 4-bit and MXFP8 experts, Triton
  attention for attention sinks, the Ray launcher, a long boot timeout;
- knobs only some vLLM versions list, offered where the installed vLLM lists them (and marked
  `where_listed`, so the space still runs on a version that does not): `performance_mode`, and on
  sm_12x the b12x backends (B12X attention; b12x / flashinfer_b12x MoE for FP4 experts, linear for
  quantized checkpoints), unverified until a Spark runs them. Without a vLLM to ask, none.
The space is validated as `autotune search` loads one (engine knobs, layout, memory fit) before
anything is written. Nothing is downloaded: the config must be on disk.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from autotune import __version__
from autotune.errors import ConfigError
from autotune.hardware.device import detect
from autotune.hardware.profiles import describe, divisible_layouts, resolve_hardware, tensor_split_refusal
from autotune.checkpoint.config import ModelConfig, config_facts, config_file, load_model_config
from autotune.checkpoint.params import CountMethod, ParamCount, count_params, meta_unavailable
from autotune.checkpoint.quantization import Checkpoint, checkpoint_format
from autotune.engines.vllm import SM12X_BACKENDS, UNVERIFIED, VALUE_FLAGS, VllmEngine
from autotune.engines.vllm_choices import EngineChoices
from autotune.engines.vllm_values import refusal
from autotune.hardware.device import host_fingerprint
from autotune.models import (
    CAPACITY_OBJECTIVE,
    ChoicesCheck,
    ENERGY_OBJECTIVE,
    WEIGHTED_OBJECTIVE,
    HardwareProfile,
    KnobSpec,
    ModelSpec,
    Objective,
    Rule,
    Scalar,
    SearchSpace,
    Quantity,
    Slo,
    SpaceObjective,
    WeightedTerm,
    Workload,
)
from autotune.planner.roofline import estimate
from autotune.space.candidates import baseline, count_candidates
from autotune.yaml_files import first_errors

#: max_model_len values tried, longest first (the shipped 4-Spark seed recipe runs 262,144)
MAX_MODEL_LENS = (262144, 131072, 65536, 32768, 16384, 8192, 4096)
#: the common safe value on GB10; 0.85 OOMed at runtime for MiniMax-M3 (multinode-spark.md §6)
UNIFIED_MEMORY_GMU = 0.80
PREFILL_DEPTHS = (4096, 16384, 65536)
#: checkpoint formats whose MoE experts run on Marlin on sm_12x (capabilities.md §7)
MARLIN_MOE_FORMATS = frozenset({"nvfp4", "mxfp4", "mxfp8", "int4"})
ONLINE_FP8_WHY = "quantization null/fp8: a 16-bit checkpoint can be quantized online to FP8"
#: the checkpoint formats each sm_12x backend takes (vLLM's b12x docs: FP4 MoE experts, FP8 / MXFP8 /
#: FP4 linear layers; FlashInfer's b12x kernels NVFP4 only)
SM12X_FORMATS: dict[str, dict[str, frozenset[str]]] = {
    "moe_backend": {"b12x": frozenset({"nvfp4", "mxfp4"}), "flashinfer_b12x": frozenset({"nvfp4"})},
    "linear_backend": {"b12x": frozenset({"fp8", "mxfp8", "nvfp4", "mxfp4"}), "flashinfer_b12x": frozenset({"nvfp4"})},
}


# ---------------------------------------------------------------------- building the space


class NewSpace(BaseModel):
    """A validated space, its YAML (with the header that gives every decision) and a summary line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    space: SearchSpace
    text: str
    summary: str
    hardware: str  # the line that says what a node is and whether the figures are this host's
    warnings: list[str] = []


@dataclass
class _Draft:
    """The space being assembled, and why each choice was made (the YAML header)."""

    fixed: dict[str, Scalar] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    knobs: list[KnobSpec] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    why: list[str] = field(default_factory=list)

    def knob(self, name: str, values: list[Scalar], description: str, where_listed: list[Scalar] | None = None) -> None:
        self.knobs.append(KnobSpec(name=name, values=values, default=values[0], description=description,
                                   where_listed=where_listed or []))

    def drop_knob(self, name: str) -> None:
        self.knobs = [k for k in self.knobs if k.name != name]


def objective_of(
    kind: SpaceObjective, ttft_ms: float | None = None, itl_ms: float | None = None, e2e_ms: float | None = None,
    attainment: float | None = None, energy_workload: str | None = None, energy_weight: float | None = None,
) -> Objective | None:
    """The space's objective for `space new` (None: the default decode objective). Limits without
    the capacity objective, the capacity objective without TTFT and ITL limits, or the energy flags
    without an energy objective are refused."""
    limits = {"--ttft-ms": ttft_ms, "--itl-ms": itl_ms, "--e2e-ms": e2e_ms, "--attainment": attainment}
    given = [flag for flag, value in limits.items() if value is not None]
    if given and kind is not SpaceObjective.CAPACITY:
        raise ConfigError(f"{', '.join(given)} set the SLO of --objective capacity, not of --objective {kind}")
    energy_flags = {"--energy-workload": energy_workload, "--energy-weight": energy_weight}
    if kind is not SpaceObjective.SPEED_ENERGY and energy_weight is not None:
        raise ConfigError(f"--energy-weight is the weight of --objective speed-energy, not of --objective {kind}")
    if kind in (SpaceObjective.DECODE, SpaceObjective.CAPACITY) and energy_workload is not None:
        raise ConfigError(f"--energy-workload is used by --objective energy and speed-energy, not {kind}")
    if kind is SpaceObjective.DECODE:
        return None
    if kind is not SpaceObjective.CAPACITY:
        return _energy_objective(kind, energy_workload or "prose", 0.5 if energy_weight is None else energy_weight,
                                 [f for f, v in energy_flags.items() if v is not None])
    missing = [flag for flag in ("--ttft-ms", "--itl-ms") if limits[flag] is None]
    if missing:
        raise ConfigError(f"--objective capacity needs {' and '.join(missing)} (the latency target it is measured under)")
    try:
        slo = Slo(ttft_ms=ttft_ms, itl_ms=itl_ms, e2e_ms=e2e_ms, **({"attainment": attainment} if attainment else {}))
    except ValidationError as exc:
        raise ConfigError(f"--objective capacity: {first_errors(exc)}") from exc
    return Objective(metric=CAPACITY_OBJECTIVE, slo=slo)


def _energy_objective(kind: SpaceObjective, workload: str, weight: float, flags: list[str]) -> Objective:
    """tokens_per_joule of `workload`, or speed_energy: its tok/s^(1 - weight) x its tok/J^weight."""
    try:
        if kind is SpaceObjective.ENERGY:
            return Objective(metric=ENERGY_OBJECTIVE, energy_workload=workload)
        if not 0 < weight < 1:
            raise ConfigError(f"--energy-weight {weight:g}: the tok/J term's weight, above 0 and below 1")
        terms = [WeightedTerm(quantity=Quantity.TOKENS_PER_S, workload=workload, weight=round(1 - weight, 6)),
                 WeightedTerm(quantity=Quantity.TOKENS_PER_JOULE, workload=workload, weight=weight)]
        return Objective(metric=WEIGHTED_OBJECTIVE, weights=terms)
    except ValidationError as exc:
        raise ConfigError(f"--objective {kind}{' (' + ', '.join(flags) + ')' if flags else ''}: "
                          f"{first_errors(exc)}") from exc


def energy_note(space: SearchSpace) -> str | None:
    """Where the space ranks by GPU energy and this host has none to read: a warning, not a refusal
    (a space is often written for another host); `search` with it exits 3 on a host like this one."""
    from autotune.bench.energy import gpu_energy_absent

    absent = gpu_energy_absent(space)
    if absent is None:
        return None
    return (f"warning: objective {space.objective.metric} needs the GPUs' energy and this host has none to read "
            f"({absent}); the space is written all the same, for a host whose GPUs NVML can read: `autotune search` "
            "with it exits 3 on a host like this one")


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "model"


def parse_layout(text: str) -> tuple[int, int]:
    """`--layout TPxPP` (`2x2`) as (tensor_parallel_size, pipeline_parallel_size)."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    tp, pp = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    if tp < 1 or pp < 1:
        raise ConfigError(f"--layout {text!r}: write it as TPxPP, tensor x pipeline parallel size, e.g. 2x2")
    return tp, pp


def choose_layout(config: ModelConfig, profile: HardwareProfile, nodes: int, layout: str | None) -> tuple[int, int]:
    """(TP, PP): `layout` where it fits the GPUs and splits the heads, else TP over every GPU; a TP
    that cannot split the heads is refused with the layouts that can, and the box counts whose TP can."""
    gpus = nodes * max(profile.gpus_per_node, 1)
    kv_heads = None if config.is_mla else config.n_kv_heads
    if layout is not None:
        tp, pp = parse_layout(layout)
        used_ok = tp * pp == gpus if nodes > 1 else tp * pp <= gpus
        if not used_ok:
            raise ConfigError(f"--layout {tp}x{pp} uses {tp * pp} GPUs; --nodes {nodes} x {profile.name} has {gpus}"
                              + ("" if nodes > 1 else " (at most that many on one node)"))
    else:
        tp, pp = gpus, 1
    refusal = tensor_split_refusal(config.n_heads, kv_heads, tp)
    if refusal is None:
        return tp, pp
    offers = [f"--layout {t}x{p} (tensor_parallel_size {t} x pipeline_parallel_size {p})"
              for t, p in divisible_layouts(config.n_heads, kv_heads, gpus) if (t, p) != (tp, pp)]
    fewer = [f"--nodes {n}" for n in range(nodes - 1, 0, -1)
             if tensor_split_refusal(config.n_heads, kv_heads, n * max(profile.gpus_per_node, 1)) is None]
    options = [f"on {nodes} x {profile.name}: {', '.join(offers)}"] if offers else []
    options += [f"fewer boxes, tensor parallel over them: {', '.join(fewer)}"] if fewer else []
    raise ConfigError(refusal + (f"; layouts that split them {'; or '.join(options)}" if options else ""))


def _sm12x(profile: HardwareProfile) -> bool:
    return (profile.compute_capability or "").startswith("sm_12")


def _listed(knob: str, values: tuple[str, ...], choices: EngineChoices | None) -> list[str]:
    """`values` of `knob` that the installed vLLM lists, in order ([] without a vLLM to ask)."""
    if choices is None:
        return []
    return [v for v in values if refusal(knob, v, VALUE_FLAGS[knob], choices) is None]


def _sm12x_values(knob: str, ckpt: Checkpoint, choices: EngineChoices | None) -> list[str]:
    """The b12x backends of `knob` that take this checkpoint's format and the installed vLLM lists."""
    takes = [v for v in SM12X_BACKENDS[knob] if ckpt.format in SM12X_FORMATS[knob].get(v, frozenset())]
    return _listed(knob, tuple(takes), choices)


def _performance_mode(draft: _Draft, choices: EngineChoices | None) -> None:
    """performance_mode where the installed vLLM has the option: its presets besides the default."""
    flag = choices.flags.get(VALUE_FLAGS["performance_mode"]) if choices else None
    if flag is None or not flag.choices:
        return
    presets: list[Scalar] = [c for c in flag.choices if c != flag.default]
    draft.knob("performance_mode", [None, *presets], f"--performance-mode preset (null = vLLM's own, {flag.default})",
               where_listed=presets)
    draft.why.append(f"performance_mode null/{'/'.join(map(str, presets))}: vLLM {choices.version} lists the option "
                     "(where_listed: a version without it keeps null)")


def _sm12x_backends(draft: _Draft, arch: ModelConfig, ckpt: Checkpoint, choices: EngineChoices | None) -> None:
    """b12x MoE backends for an FP4 MoE (beside Marlin, the default) and b12x linear backends for a
    quantized checkpoint, where the installed vLLM lists them."""
    moe = _sm12x_values("moe_backend", ckpt, choices) if arch.is_moe else []
    if moe and draft.fixed.get("moe_backend") == "marlin":
        del draft.fixed["moe_backend"]
        draft.knob("moe_backend", ["marlin", *moe], f"marlin as before; {', '.join(moe)}: {UNVERIFIED}", where_listed=moe)
        draft.why.append(f"moe_backend marlin/{'/'.join(moe)}: the sm_12x b12x kernels take {ckpt.format} experts, "
                         f"{UNVERIFIED}; Marlin stays the default")
    linear = [] if ckpt.is_16bit else _sm12x_values("linear_backend", ckpt, choices)
    if linear:
        draft.knob("linear_backend", [None, *linear], f"null lets vLLM choose; {', '.join(linear)}: {UNVERIFIED}",
                   where_listed=linear)
        draft.why.append(f"linear_backend null/{'/'.join(linear)}: the sm_12x b12x GEMMs take {ckpt.format} "
                         f"weights, {UNVERIFIED}")


def _choose_knobs(
    draft: _Draft, arch: ModelConfig, ckpt: Checkpoint, profile: HardwareProfile, nodes: int,
    layout: tuple[int, int], chosen: bool, choices: EngineChoices | None = None,
) -> None:
    tp, pp = layout
    draft.fixed["tensor_parallel_size"] = tp
    if pp > 1:
        draft.fixed["pipeline_parallel_size"] = pp
    if chosen:
        draft.why.append(f"tensor_parallel_size {tp} x pipeline_parallel_size {pp}: --layout {tp}x{pp}")
    else:
        draft.why.append(f"tensor_parallel_size {tp}: one rank per GPU over {nodes} x {profile.name}")
    if profile.unified_memory:
        draft.fixed["gpu_memory_utilization"] = UNIFIED_MEMORY_GMU
        draft.why.append(
            f"gpu_memory_utilization {UNIFIED_MEMORY_GMU}: the common safe value on unified memory; more risks an "
            "OOM under load or a wedged host (multinode-spark.md §6)"
        )
    if ckpt.is_16bit:
        draft.knob("quantization", [None, "fp8"], "online FP8 (W8A8) of the 16-bit checkpoint; null = as stored")
        draft.why.append(ONLINE_FP8_WHY)
    else:
        draft.why.append(f"quantization left out: vLLM reads the checkpoint's own ({ckpt.quant_method}) from config.json")
    if arch.is_moe and ckpt.format in MARLIN_MOE_FORMATS and _sm12x(profile):
        draft.fixed["moe_backend"] = "marlin"
        draft.why.append(
            f"moe_backend marlin: the {ckpt.format} MoE kernel that runs on {profile.compute_capability} "
            "(capabilities.md §7)"
        )
    if arch.is_mla:
        which = "it has one dense MLA backend on sm_12x (TRITON_MLA)" if _sm12x(profile) else "it picks the MLA backend"
        draft.why.append(f"no kv_cache_dtype or attention_backend knob for an MLA model: vLLM decides; {which}")
    else:
        fp8_why = " (the checkpoint carries FP8 KV scales)" if ckpt.fp8_kv_scales else ""
        draft.knob("kv_cache_dtype", [None, "fp8"], f"null = the model dtype; fp8 halves KV bytes{fp8_why}")
        if arch.attention_sinks and _sm12x(profile):
            draft.fixed["attention_backend"] = "TRITON_ATTN"
            draft.why.append("attention_backend TRITON_ATTN: on sm_12x only Triton attention has attention sinks")
        elif _sm12x(profile):
            b12x = _listed("attention_backend", SM12X_BACKENDS["attention_backend"], choices)
            unverified = f"; {', '.join(b12x)}: {UNVERIFIED}" if b12x else ""
            draft.knob("attention_backend", [None, "TRITON_ATTN", "FLASHINFER", *b12x],
                       f"null lets vLLM choose{unverified}", where_listed=b12x)
            draft.why.append(
                "attention_backend null/TRITON_ATTN/FLASHINFER: FLASH_ATTN is FA2 on sm_12x and takes no fp8 KV"
                + (f"; {'/'.join(b12x)} (sm_12x b12x attention, {UNVERIFIED})" if b12x else "")
            )
            if arch.head_dim == 256:
                draft.rules.append(
                    Rule(
                        when={"kv_cache_dtype": ["fp8"]},
                        then={"attention_backend": ["TRITON_ATTN"]},
                        reason="FlashInfer on sm_121 fails hd256 + fp8 KV (vllm#50331); unset, vLLM would pick it",
                    )
                )
    if arch.mtp_layers:
        draft.fixed["spec_method"] = "mtp"
        draft.knob("draft_k", [0, 1, 2, 3], "MTP speculative tokens from the model's own MTP layers (0 = off)")
        draft.why.append(f"spec_method mtp: config.json has {arch.mtp_layers} MTP layer(s)")
    else:
        draft.fixed["spec_method"] = "ngram"
        draft.knob("draft_k", [0, 2, 4], "n-gram (prompt lookup) speculative tokens (0 = off)")
        draft.why.append("spec_method ngram: no MTP layers or drafter named; prompt lookup needs no extra weights")
    draft.knob("max_num_seqs", [None, 4, 16], "concurrent sequences (null = the engine default)")
    if _sm12x(profile):
        _sm12x_backends(draft, arch, ckpt, choices)
    _performance_mode(draft, choices)


def _space(
    name: str, model: ModelSpec, profile: HardwareProfile, nodes: int, draft: _Draft, context: int
) -> SearchSpace:
    prefill = [t for t in PREFILL_DEPTHS if t <= context // 2] or [max(context // 4, 256)]
    return SearchSpace(
        name=name,
        description=f"{model.name} on {nodes} x {profile.name} (written by autotune space new from config.json)",
        engine="vllm",
        hardware=profile.name,
        nodes=nodes,
        launcher="ray" if nodes > 1 else "process",
        model=model,
        fixed={**draft.fixed, "max_model_len": context},
        env=draft.env,
        knobs=draft.knobs,
        rules=draft.rules,
        workload=Workload(
            decode_max_tokens=256,
            prefill_tokens=prefill,
            concurrency=[1, 16] if nodes > 1 else [1, 4],
            request_timeout_s=900,
            startup_timeout_s=1800,
        ),
    )


def _fit(name: str, model: ModelSpec, profile: HardwareProfile, nodes: int, draft: _Draft) -> tuple[SearchSpace, str]:
    """The space at the longest context whose baseline fits; (16-bit) online fp8 when nothing else fits."""
    top = model.context_max or MAX_MODEL_LENS[0]
    lengths = [n for n in MAX_MODEL_LENS if n <= top] or [top]
    if top < MAX_MODEL_LENS[0] and top not in lengths:
        lengths.insert(0, top)
    last_reason = ""
    for attempt in ("as stored", "fp8"):
        if attempt == "fp8":
            if not any(k.name == "quantization" for k in draft.knobs):
                break
            draft.drop_knob("quantization")
            draft.fixed["quantization"] = "fp8"
            draft.why = [w for w in draft.why if w != ONLINE_FP8_WHY]
            draft.why.append("quantization fp8 (fixed): the 16-bit weights fit at no context length, online FP8 does")
        for length in lengths:
            space = _space(name, model, profile, nodes, draft, length)
            est = estimate(space, baseline(space), profile, nodes)
            if est.fits:
                budget = f" of the {est.engine_budget_gb:.1f} GB the engine takes" if est.engine_budget_gb else ""
                how = "" if attempt == "as stored" else " (with online fp8 weights)"
                return space, (
                    f"max_model_len {length}: the longest of {', '.join(map(str, lengths))} at which the baseline fits; "
                    f"it needs {est.total_gb:.1f} GB per {'GPU' if profile.gpus_per_node > 1 else 'node'}{budget}{how}"
                )
            last_reason = est.reason or ""
    raise ConfigError(
        f"{model.name} does not fit on {nodes} x {profile.name} even at {lengths[-1]} tokens: {last_reason}; "
        "more boxes or a smaller checkpoint (NVFP4, or 4-bit AWQ/GPTQ) would"
    )


def _validate(space: SearchSpace, profile: HardwareProfile, nodes: int) -> SearchSpace:
    """The checks `autotune search` makes when it loads a space (engine knobs, layout, candidates)."""
    from autotune.engines import get_engine
    from autotune.space.layout import launchable

    text = yaml.safe_dump(space.model_dump(mode="json"), sort_keys=False)
    try:
        loaded = SearchSpace.model_validate(yaml.safe_load(text))
    except ValidationError as exc:  # a bug here, but say it plainly
        raise ConfigError(f"the written space does not load: {first_errors(exc)}") from exc
    engine = get_engine(loaded.engine).use_space(loaded)
    launchable(loaded, engine, profile, nodes)
    return loaded


def _yaml(space: SearchSpace, header: list[str]) -> str:
    data = space.model_dump(mode="json", exclude_defaults=True)
    data["model"] = space.model.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    data["knobs"] = [  # every knob says its default (trial 0's value) out loud
        {"name": k.name, "values": k.values, "default": k.default, **({"where_listed": k.where_listed} if k.where_listed else {}),
         "description": k.description} for k in space.knobs
    ]
    order = ["name", "description", "engine", "hardware", "nodes", "launcher", "model", "fixed", "env", "knobs", "rules",
             "workload", "objective", "gates"]
    ordered = {k: data[k] for k in order if k in data}
    body = yaml.safe_dump(ordered, sort_keys=False, width=110, allow_unicode=True)
    return "".join(f"# {line}\n" if line else "#\n" for line in header) + body


def _model_dir(model: str) -> Path:
    """The model directory of `model` (a directory holding config.json, or the file itself)."""
    path = Path(model).expanduser()
    if not path.exists():
        raise ConfigError(
            f"{model} does not exist; autotune downloads nothing: put the model (or just its config.json) on disk "
            "first, e.g. `hf download ORG/NAME config.json --local-dir DIR`, and pass --model DIR"
        )
    config = config_file(path)
    if not config.is_file():
        raise ConfigError(f"{path} holds no config.json (a Hugging Face checkpoint directory has one)")
    return config.parent.resolve()


def _counted_lines(config: ModelConfig, params: ParamCount, ckpt: Checkpoint, bits: float) -> list[str]:
    """The header's account of how the config was read and each number counted."""
    lines = [f"config.json read by {config.read_by}."]
    if config.defaults:
        lines.append("Not in config.json: " + "; ".join(config.defaults) + ".")
    why = meta_unavailable(config) if params.method is CountMethod.CLOSED_FORM else None
    lines.append(f"Parameters: {params.describe(why)}.")
    lines.append(f"Checkpoint {ckpt.format} = {bits:.2f} bits/weight on average (embeddings, vision tower and "
                 "unquantized layers at 16).")
    return lines


def _gpu_count_note(profile: HardwareProfile, nodes: int, layout: tuple[int, int]) -> str | None:
    """Where a built-in profile has several GPUs per node: what a host with fewer does instead."""
    if profile.detected_on or profile.gpus_per_node <= 1:
        return None
    return (f"note: the built-in {profile.name} profile has {profile.gpus_per_node} GPUs per node, so the space "
            f"runs tensor_parallel_size {layout[0]} x pipeline_parallel_size {layout[1]}; on a host with fewer GPUs run "
            "`autotune space new --hardware auto` on that host (it counts its GPUs), or pick the ranks with "
            f"--layout (--layout 1x1: one GPU)")


def new_space(
    model: str, hardware: str, nodes: int, name: str | None = None, objective: Objective | None = None,
    layout: str | None = None,
) -> NewSpace:
    """A validated search space for the model whose config.json is at `model`, on nodes x hardware
    (`auto`, or the named profile of this host: with this host's GPU count and memory per GPU);
    `objective` replaces the default (single-stream decode); `layout` (`TPxPP`) picks the ranks."""
    model_dir = _model_dir(model)
    config = load_model_config(model_dir)
    device = detect()
    profile = resolve_hardware(hardware, device)
    if profile.gpus_per_node == 0:
        raise ConfigError(
            f"space new writes vLLM spaces for GPU hardware; for {profile.name} start from "
            "search_spaces/llamacpp-gemma3-270m.yaml"
        )
    ranks = choose_layout(config, profile, nodes, layout)
    ckpt = checkpoint_format(config.raw)
    params = count_params(config)
    bits = ckpt.weight_bits(params)
    label = model_dir.name
    boxes = f"{profile.name}x{nodes}" if profile.name[-1].isdigit() else f"{profile.name}{nodes}"
    name = name or f"{slug(label)}-{boxes}"
    tokenizer = _json(model_dir / "tokenizer_config.json")
    has_template = (model_dir / "chat_template.jinja").is_file() or "chat_template" in tokenizer
    tokenizer_known = (model_dir / "tokenizer_config.json").is_file()
    spec = ModelSpec(
        name=label,
        path=str(model_dir),
        served_name=slug(label),
        architecture=config.name,
        params_total_b=round(params.total / 1e9, 3),
        params_active_b=round(params.active / 1e9, 3),
        params_vision_b=round(params.vision / 1e9, 3) if params.vision else None,
        params_mtp_b=round(params.mtp / 1e9, 3) if params.mtp else None,
        weight_bits=round(bits, 3),
        **{k: v for k, v in config_facts(config).items() if k in ModelSpec.model_fields},
        prompt_style="completion" if tokenizer_known and not has_template else "chat",
        notes=f"written from config.json by autotune space new {__version__}; parameters counted "
              f"{'on the meta device' if params.method is CountMethod.META else 'in closed form'}",
    )
    draft = _Draft()
    if profile.unified_memory:
        draft.env["VLLM_ENGINE_READY_TIMEOUT_S"] = "1800"  # GB10 boots take 5-15 min
    if nodes > 1 and profile.name == "spark":
        draft.env.update({"NCCL_CUMEM_ENABLE": "0", "NCCL_NVLS_ENABLE": "0"})  # as the 4-Spark MiniMax setups
    engine = VllmEngine()
    asked = engine.engine_choices(host_fingerprint(device, engine).key())
    choices = None if isinstance(asked, ChoicesCheck) else asked
    _choose_knobs(draft, config, ckpt, profile, nodes, ranks, layout is not None, choices)
    if isinstance(asked, ChoicesCheck):
        draft.why.append("no performance_mode or b12x backends (knobs only some vLLM versions list): "
                         f"{asked.detail or 'vllm is not installed here'}")
    space, fit_why = _fit(name, spec, profile, nodes, draft)
    if objective is not None:
        waves = sorted(set(space.workload.concurrency) | set(objective.waves))  # a wave the objective reads is measured
        work = space.workload.model_copy(update={"concurrency": waves})
        space = space.model_copy(update={"objective": objective, "workload": work})
    space = _validate(space, profile, nodes)
    style = (
        "prompt_style chat: the tokenizer has a chat template" if has_template
        else "prompt_style completion: the tokenizer has no chat template (a base model)" if tokenizer_known
        else "prompt_style chat: assumed (no tokenizer_config.json next to config.json); set completion for a base model"
    )
    gpu_note = None if layout is not None else _gpu_count_note(profile, nodes, ranks)
    header = [
        f"{space.name}: written by `autotune space new` ({__version__}) from {model_dir.name}/config.json for "
        f"{nodes} x {profile.name}.",
        f"config.json: {config.summary()}.",
        *_counted_lines(config, params, ckpt, bits),
        f"Hardware: {describe(profile)}.",
        *([gpu_note.removeprefix("note: ") + "."] if gpu_note else []),
        f"Memory fit on {profile.name}: {fit_why}.",
        "Choices:",
        *(f"- {line}" for line in [*draft.why, style]),
        *([f"Objective capacity_at_slo: the most concurrent streams with {objective.slo.describe()} (doubling from "
           f"{objective.slo.initial_streams}, then bisecting; docs/metrics.md)."] if objective and objective.slo else []),
        *([f"Objective {objective.metric}: {objective.label} (docs/metrics.md); it needs the GPUs' energy (NVML's "
           "energy counter or power readings) on the host it runs on, else `search` exits 3."]
          if objective and objective.gpu_energy else []),
        "Knob defaults are the engine's own (null = flag left out), so trial 0 is the untuned baseline.",
        "Edit freely; `autotune plan --space THIS_FILE` re-checks it.",
        "",
    ]
    text = _yaml(space, header)
    summary = (
        f"space {space.name}: {count_candidates(space)} candidates on {nodes} x {profile.name}; "
        f"{params.total / 1e9:.1f}B params ({ckpt.format}); {fit_why.split(':')[0]}"
    )
    closed = meta_unavailable(config) if params.method is CountMethod.CLOSED_FORM else None
    warnings = [w for w in (energy_note(space), gpu_note, closed and f"note: parameters counted in closed form: {closed}")
                if w]
    return NewSpace(space=space, text=text, summary=summary, hardware=f"hardware {describe(profile)}",
                    warnings=warnings)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_space(new: NewSpace, output: Path | None) -> None:
    """Write the YAML to `output`, never over an existing file (nothing stored is lost)."""
    if output is None:
        return
    if output.exists():
        raise ConfigError(f"{output} exists: nothing written (choose another -o, or remove it first)")
    try:
        output.write_text(new.text)
    except OSError as exc:
        raise ConfigError(f"cannot write {output}: {exc.strerror}") from exc
