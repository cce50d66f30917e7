"""Memory fit and roofline estimates per candidate, before anything is launched.

Memory per GPU (= per node on one-GPU boxes such as the Spark):
    weights / (TP x PP)  +  KV cache for one full-context sequence  +  overhead
must fit in the usable memory (GPU memory minus the OS reserve on unified memory) and, for vLLM,
in what the engine grabs (gpu_memory_utilization x GPU memory); what vLLM grabs beyond the
weights and overhead becomes its KV pool, reported in tokens.

Decode (one stream):
    step time = (active weight bytes / TP + KV bytes read at the mean context) / bandwidth
                / decode_efficiency  +  TP all-reduce time  +  fixed step overhead
    tok/s     = acceptance length / (step time x drafting cost)
Prefill: prefill_efficiency x TFLOPS x TP / (2 x active params), linear layers only.

A wave of N streams (workload.concurrency >= 2) decodes at batch B = min(N, the engine's cap
(vLLM max_num_seqs; llama.cpp one at a time), the requests the KV pool holds):
    step(B) = max((weights read by B tokens + B x one stream's KV) / bandwidth / decode_efficiency
                  + TP all-reduce + step overhead + (B - 1) x stream_step_overhead,
                  B x 2 x active params / peak FLOPS)
    output tok/s = B / step(B)   (requests beyond B queue; no speculative gain at B > 1)

Efficiencies are fitted from published measurements (autotune/planner/calibration.py,
hardware_profiles.yaml). The model facts come from autotune/checkpoint/config.py; the plan's table is
autotune/output/plan_text.py's.
A fact the estimate needs and does not have makes its term "unknown" (listed in the estimate),
never zero: a memory total without it is a lower bound, a decode figure an upper bound.

One module of ~780 lines on purpose: the memory fit, the decode step and the waves share one
candidate's case (`_Case`: bytes per weight, KV per token, the TP/PP split), built once per candidate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from autotune.engines import Engine, Knobs, get_engine
from autotune.errors import ConfigError
from autotune.bench.capacity import streams_held
from autotune.hardware.profiles import parallel_layout
from autotune.checkpoint.config import ModelFacts, model_facts
from autotune.models import (
    BatchLimit,
    Candidate,
    DecodeBound,
    HardwareProfile,
    PlanEstimate,
    PlanReport,
    Scalar,
    SearchSpace,
    StreamsEstimate,
    WaveEstimate,
)

GB = 1e9

# Bits per weight in memory for --quantization values. Applied to every parameter (embeddings
# and norms that stay 16-bit are ignored). Block formats carry their scales:
QUANT_BITS: dict[str, float] = {
    "fp8": 8.0,
    "fbgemm_fp8": 8.0,
    "ptpc_fp8": 8.0,
    "modelopt": 8.0,  # ModelOpt FP8
    "modelopt_fp4": 4.5,  # NVFP4: e2m1 + one fp8 scale per 16 values
    "nvfp4": 4.5,
    "mxfp4": 4.25,  # e2m1 + one e8m0 scale per 32 values
    "modelopt_mxfp8": 8.25,  # e4m3 + one e8m0 scale per 32
    "mxfp8": 8.25,
    "awq": 4.16,  # 4-bit + fp16 scale and packed 4-bit zero per group of 128
    "awq_marlin": 4.16,
    "gptq": 4.16,
    "gptq_marlin": 4.16,
    "bitsandbytes": 4.13,  # nf4, blocks of 64 with double-quantized absmax
    "experts_int8": 8.0,
}
# Weight-only formats: the checkpoint (or the space's stated bpw) decides the size.
CHECKPOINT_FORMATS = {"exl3", "gguf", "compressed-tensors"}

# Which tensor-core precision prefill runs in, per --quantization. Weight-only formats and
# Marlin kernels dequantize to bf16 (W4A16 / W8A16).
COMPUTE_PRECISION: dict[str, str] = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "ptpc_fp8": "fp8",
    "modelopt": "fp8",
    "modelopt_mxfp8": "fp8",
    "mxfp8": "fp8",
    "modelopt_fp4": "fp4",
    "nvfp4": "fp4",
}

# Overhead per GPU beyond the engine's own fixed part (Engine.memory_overhead): stated, not fitted.
ACTIVATION_WIDTHS = 16  # hidden-size-wide bf16 buffers alive per batched token at the peak
ACTIVATION_FRACTION = 0.03  # of weights per GPU, when hidden_size is unknown

# Decode context: our prose/structured prompts are short; the mean context of a decode step is
# the prompt plus half the generated tokens.
DECODE_PROMPT_TOKENS = 256


@dataclass(frozen=True)
class DraftPrior:
    """Speculative decoding prior: acceptance length L(k) = 1 + sum(p^i, i=1..k); one step costs
    (1 + fixed + per_token x k) target steps. The study measures the real acceptance."""

    accept: float
    fixed: float
    per_token: float
    source: str


SPEC_PRIORS: dict[str, DraftPrior] = {
    "ngram": DraftPrior(0.3, 0.0, 0.0, "prior: prompt-lookup hits depend on the text, low on prose"),
    "ngram_gpu": DraftPrior(0.3, 0.0, 0.0, "prior, as ngram"),
    "suffix": DraftPrior(0.3, 0.0, 0.0, "prior, as ngram"),
    "mtp": DraftPrior(
        0.83, 0.0, 0.03,
        "Qwen3.8-Flash-Next MTP k=2: mean acceptance 2.54 of 3 (vcruz305/vllm-exl3 README); "
        "cost: one extra decoder layer per drafted token",
    ),
    "eagle": DraftPrior(0.6, 0.0, 0.03, "prior: one-layer draft head per drafted token"),
    "eagle3": DraftPrior(0.6, 0.0, 0.03, "prior: one-layer draft head per drafted token"),
    "dspark": DraftPrior(
        0.63, 0.05, 0.0,
        "MiniMax-M3 DSpark k=8: 21% draft acceptance = 1.68 accepted per step = sum(p^i, i<=8) at "
        "p=0.63 (mpfaffenberger/MiniMax-M3-NVFP4-DSpark-vLLM-4x-DGX-Spark README); cost: one "
        "parallel block-drafter pass",
    ),
    "dflash": DraftPrior(0.63, 0.05, 0.0, "as dspark (same block-drafter family)"),
    "draft_model": DraftPrior(0.7, 0.0, 0.1, "prior: a ~10x smaller model per drafted token"),
    "medusa": DraftPrior(0.5, 0.02, 0.0, "prior: parallel heads"),
}


# ---------------------------------------------------------------- the estimate


@dataclass
class _Notes:
    unknown: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    def missing(self, term: str, why: str) -> None:
        self.unknown.append(f"{term}: unknown ({why})")

    def assume(self, text: str) -> None:
        if text not in self.assumptions:
            self.assumptions.append(text)


def _embedding_params(facts: ModelFacts) -> tuple[float, float]:
    """(embedding + LM head params, LM head params read per token); 0s when config.json does not say."""
    if not (facts.vocab_size and facts.hidden_size):
        return 0.0, 0.0
    table = float(facts.vocab_size * facts.hidden_size)
    return (table if facts.tie_word_embeddings else 2 * table), table


def _weight_bytes(facts: ModelFacts, quant: str | None, notes: _Notes) -> tuple[float | None, float]:
    """All weights of the model in memory, in bytes, and the params that stay 16-bit in them."""
    params = facts.params_total_b * 1e9 if facts.params_total_b else None
    same_as_checkpoint = quant is None or quant == facts.checkpoint_quant or quant in CHECKPOINT_FORMATS
    if same_as_checkpoint and facts.checkpoint_bytes:
        notes.assume(f"weights: {facts.checkpoint_bytes / GB:.1f} GB from {facts.sources['checkpoint_bytes']}")
        return float(facts.checkpoint_bytes), 0.0
    kept = 0.0
    if quant in QUANT_BITS and not (quant == facts.checkpoint_quant and facts.weight_bits):
        bits, how = QUANT_BITS[quant], f"--quantization {quant} = {QUANT_BITS[quant]} bits/weight"
        # online quantization of a 16-bit checkpoint: vLLM quantizes the linear layers only, the
        # embedding and LM head keep 16 bits (measured: docs/measurements.md, 2026-12-01)
        if facts.checkpoint_quant is None and (facts.weight_bits or facts.dtype_bits or 16) == 16:
            kept = _embedding_params(facts)[0]
    elif facts.weight_bits:
        bits, how = facts.weight_bits, f"checkpoint {facts.weight_bits} bits/weight (space)"
    elif quant is None and facts.dtype_bits:
        bits, how = facts.dtype_bits, f"unquantized {facts.dtype_bits:g}-bit checkpoint (config.json)"
    else:
        notes.missing("weights", f"no bits per weight for quantization={quant!r} and no checkpoint size")
        return None, 0.0
    if params is None and facts.checkpoint_bytes and facts.dtype_bits and not facts.checkpoint_quant:
        params = facts.checkpoint_bytes * 8 / facts.dtype_bits
        notes.assume(f"params = checkpoint size / {facts.dtype_bits:g}-bit dtype = {params / 1e9:.2f}B")
    if params is None:
        notes.missing("weights", "params_total_b not given")
        return None, 0.0
    if kept:
        notes.assume(f"weights: {params / 1e9:g}B params x {how}, but embedding + LM head "
                     f"({kept / 1e9:.2f}B) at 16 bits")
        return (params - kept) * bits / 8 + kept * 2, kept
    notes.assume(f"weights: {params / 1e9:g}B params x {how}, applied to every parameter")
    return params * bits / 8, 0.0


def _active_fraction(facts: ModelFacts, notes: _Notes) -> float | None:
    if facts.params_active_b and facts.params_total_b:
        if facts.params_active_b < facts.params_total_b:
            notes.assume(
                f"decode reads {facts.params_active_b:g}B of {facts.params_total_b:g}B params per token "
                f"at the average bits/weight"
            )
        return min(facts.params_active_b / facts.params_total_b, 1.0)
    if facts.n_experts:
        notes.missing("active weights", "MoE model without params_active_b")
        return None
    notes.assume("dense: decode reads every weight (no params_active_b or expert count given)")
    return 1.0


@dataclass(frozen=True)
class _KvShape:
    per_token_bytes: float  # one token, all full-attention layers, whole model
    sliding_token_bytes: float  # one token, all sliding-window layers
    window: int | None
    gpu_fraction: float  # share of a layer's KV one GPU holds under TP


def _kv_shape(facts: ModelFacts, elem: float, tp: int, notes: _Notes) -> _KvShape | None:
    layers = facts.kv_layers or facts.n_layers
    if not layers:
        notes.missing("KV cache", "n_layers not given")
        return None
    if facts.kv_lora_rank:
        width = facts.kv_lora_rank + (facts.qk_rope_head_dim or 0)
        notes.assume(f"MLA: one {width}-wide latent per token and layer, replicated on every TP rank")
        per_layer, fraction = width * elem, 1.0
    else:
        if not (facts.n_kv_heads and facts.head_dim):
            notes.missing("KV cache", "n_kv_heads or head_dim not given")
            return None
        per_layer = 2 * facts.n_kv_heads * facts.head_dim * elem
        fraction = max(facts.n_kv_heads // tp, 1) / facts.n_kv_heads
        if facts.n_kv_heads < tp:
            notes.assume(f"{facts.n_kv_heads} KV heads < TP {tp}: heads replicated, one per rank")
    if facts.kv_layers and facts.n_layers and facts.kv_layers < facts.n_layers and not facts.sliding_layers:
        notes.assume(f"{facts.n_layers - facts.kv_layers} layers keep no growing KV cache (kv_layers)")
    return _KvShape(
        per_token_bytes=per_layer * layers,
        sliding_token_bytes=per_layer * facts.sliding_layers,
        window=facts.sliding_window,
        gpu_fraction=fraction,
    )


def _kv_bytes(shape: _KvShape, tokens: int) -> float:
    """KV bytes of one sequence of `tokens`, whole model."""
    sliding = shape.sliding_token_bytes * min(tokens, shape.window or tokens)
    return shape.per_token_bytes * tokens + sliding


def _context(engine: Engine, params: Knobs, facts: ModelFacts, notes: _Notes) -> int | None:
    knob = engine.context_knob
    value = params.number(knob)
    if value:
        return int(value)
    if facts.context_max:
        notes.assume(f"context = the model's {facts.context_max} tokens ({knob} unset)")
        return facts.context_max
    notes.missing("KV cache", f"{knob} unset and context_max not given")
    return None


def _overhead_gb(engine: Engine, params: Knobs, facts: ModelFacts, weights_gpu_gb: float | None,
                 notes: _Notes) -> float:
    fixed, tokens = engine.memory_overhead(params)
    if facts.hidden_size:
        activations = tokens * facts.hidden_size * 2 * ACTIVATION_WIDTHS / GB
        notes.assume(
            f"overhead = {fixed:g} GB fixed + activations {int(tokens)} tokens x hidden {facts.hidden_size} "
            f"x {ACTIVATION_WIDTHS} bf16 buffers"
        )
    else:
        activations = ACTIVATION_FRACTION * (weights_gpu_gb or 0.0)
        notes.assume(f"overhead = {fixed:g} GB fixed + {ACTIVATION_FRACTION:.0%} of weights (hidden_size unknown)")
    return fixed + activations


def _spec(engine: Engine, params: Knobs, facts: ModelFacts, notes: _Notes) -> tuple[float, float, float]:
    """(acceptance length, step cost in target steps, expert-read factor) for the draft settings."""
    k = int(params.number("draft_k") or 0)
    if k <= 0:
        return 1.0, 1.0, 1.0
    method = engine.spec_method(params)
    if method is None:
        notes.missing("speculative gain", f"draft_k={k} without spec_method")
        return 1.0, 1.0, 1.0
    prior = SPEC_PRIORS.get(method)
    if prior is None:
        notes.missing("speculative gain", f"no prior for spec_method {method!r}")
        return 1.0, 1.0, 1.0
    length = 1 + sum(prior.accept**i for i in range(1, k + 1))
    cost = 1 + prior.fixed + prior.per_token * k
    notes.assume(
        f"spec {method} k={k}: acceptance length {length:.2f} (p={prior.accept}), drafting "
        f"+{cost - 1:.0%} per step; {prior.source}"
    )
    expert_factor = 1.0
    if facts.is_moe:
        touched = _experts_touched(facts, k + 1)
        if touched is not None:
            expert_factor = touched
            notes.assume(f"verifying {k + 1} tokens reads {expert_factor:.2f}x the experts of one "
                         f"({facts.experts_per_tok} of {facts.n_experts})")
        else:
            notes.missing("MoE verify cost", "n_experts / experts_per_tok not given; decode is an upper bound")
    return length, cost, expert_factor


def _experts_touched(facts: ModelFacts, tokens: int) -> float | None:
    """Experts per layer that `tokens` tokens of one step touch, relative to one token's
    experts_per_tok (uniform routing); None when the expert counts are unknown."""
    e, a = facts.n_experts, facts.experts_per_tok
    if not (e and a):
        return None
    return (e / a) * (1 - (1 - a / e) ** tokens)


def _expert_share(facts: ModelFacts) -> float:
    """Share of the active params that sit in routed experts (0 for dense or unknown)."""
    e, a = facts.n_experts, facts.experts_per_tok
    total, active = facts.params_total_b, facts.params_active_b
    if not (e and a and total and active) or e <= a or active >= total:
        return 0.0
    per_expert = (total - active) / (e - a)
    return min(a * per_expert / active, 1.0)


def _allreduce_s(tp: int, hardware: HardwareProfile, facts: ModelFacts, notes: _Notes) -> float:
    if tp <= 1:
        return 0.0
    per_node = max(hardware.gpus_per_node, 1)
    tp_nodes = math.ceil(tp / per_node)
    if not facts.n_layers:
        notes.missing("TP communication", "n_layers not given; decode is an upper bound")
        return 0.0
    if tp_nodes > 1:
        if hardware.allreduce_step_us is None:
            notes.missing("TP communication", f"no fitted all-reduce latency for {hardware.name}")
            return 0.0
        per = 2 * (tp_nodes - 1) * hardware.allreduce_step_us
        where = f"ring over {tp_nodes} nodes, 2x{tp_nodes - 1} steps of {hardware.allreduce_step_us:g} us"
    else:
        if hardware.intra_node_allreduce_us is None:
            notes.missing("TP communication", f"no intra-node all-reduce latency for {hardware.name}")
            return 0.0
        per, where = hardware.intra_node_allreduce_us, "inside the node"
    notes.assume(f"TP comm: 2 all-reduces per layer x {facts.n_layers} layers, {per:g} us each ({where}); "
                 f"latency-bound, bandwidth ignored")
    return 2 * facts.n_layers * per * 1e-6


def _prefill_tflops(params: Knobs, hardware: HardwareProfile, notes: _Notes) -> float:
    precision, tflops = _compute_precision(params, hardware)
    if precision != "bf16" and tflops is None:
        notes.assume(f"{hardware.name} has no {precision} tensor cores: prefill at bf16")
        precision, tflops = "bf16", None
    notes.assume(f"prefill in {precision} tensor math, linear layers only (attention FLOPs not counted)")
    return tflops or hardware.bf16_tflops


@dataclass(frozen=True)
class _Case:
    """Everything one estimate reads."""

    space: SearchSpace
    engine: Engine
    params: Knobs
    model: ModelFacts
    hardware: HardwareProfile
    tp: int
    pp: int
    notes: _Notes


@dataclass(frozen=True)
class _Memory:
    weights: float | None  # whole model, bytes
    kept16: float  # params of `weights` that stay 16-bit under online quantization (embedding, LM head)
    weights_gpu_gb: float | None
    shape: _KvShape | None
    context: int | None
    kv_gpu_gb: float | None
    overhead_gb: float
    total_gb: float
    usable_gb: float
    budget_gb: float | None  # vLLM: what the engine grabs
    pool_tokens: int | None


def _memory(case: _Case) -> _Memory:
    engine, params, model, hardware, notes = case.engine, case.params, case.model, case.hardware, case.notes
    tp, pp = case.tp, case.pp
    weights, kept16 = _weight_bytes(model, _str(params.get("quantization")), notes)
    weights_gpu_gb = weights / (tp * pp) / GB if weights is not None else None
    elem = engine.kv_element_bytes(params, model.dtype_bits, notes)
    shape = _kv_shape(model, elem, tp, notes) if elem is not None else None
    context = _context(engine, params, model, notes)
    kv_gpu_gb = None
    if shape is not None and context is not None:
        kv_gpu_gb = _kv_bytes(shape, context) * shape.gpu_fraction / pp / GB
        notes.assume(f"KV: one full {context}-token sequence must fit (the engine's startup check)")
    overhead = _overhead_gb(engine, params, model, weights_gpu_gb, notes)
    total = (weights_gpu_gb or 0.0) + (kv_gpu_gb or 0.0) + overhead
    pool_tokens = None
    budget = engine.memory_budget_gb(params, hardware.memory_gb_per_gpu)
    if budget is not None:
        if shape is not None and weights_gpu_gb is not None:
            per_token_gpu = (shape.per_token_bytes + shape.sliding_token_bytes) * shape.gpu_fraction / pp
            pool_gb = budget - weights_gpu_gb - overhead
            pool_tokens = max(int(pool_gb * GB / per_token_gpu), 0) if per_token_gpu else None
    return _Memory(
        weights=weights, kept16=kept16, weights_gpu_gb=weights_gpu_gb, shape=shape, context=context, kv_gpu_gb=kv_gpu_gb,
        overhead_gb=overhead, total_gb=total, usable_gb=hardware.memory_gb_per_gpu - hardware.os_reserve_gb,
        budget_gb=budget, pool_tokens=pool_tokens,
    )


def _fit_reason(case: _Case, mem: _Memory) -> str | None:
    """Why the candidate cannot fit, with the numbers; None when it fits (or cannot be ruled out)."""
    hardware = case.hardware
    where = "per GPU" if hardware.gpus_per_node > 1 else "per node"
    gpu_gb, reserve = hardware.memory_gb_per_gpu, hardware.os_reserve_gb
    lower = " at least" if mem.weights_gpu_gb is None or mem.kv_gpu_gb is None else ""
    needs = (f"needs{lower} {mem.total_gb:.1f} GB {where} "
             f"({_breakdown(mem.weights_gpu_gb, mem.kv_gpu_gb, mem.overhead_gb)})")
    usable = f"usable {mem.usable_gb:.1f} GB"
    if reserve:
        usable += f" ({gpu_gb:g} GB - {reserve:g} GB OS reserve)"
    if mem.total_gb > mem.usable_gb:
        return f"{needs} > {usable}"
    if mem.budget_gb is not None:
        gmu = f"gpu_memory_utilization {mem.budget_gb / gpu_gb:g}"
        if mem.budget_gb > mem.usable_gb:
            return f"{gmu} grabs {mem.budget_gb:.1f} GB {where} > {usable}"
        if mem.total_gb > mem.budget_gb:
            return f"{needs} > the engine's {mem.budget_gb:.1f} GB ({gmu} x {gpu_gb:g} GB)"
    if lower:
        case.notes.assume("fit unverified: a memory term is unknown")
    return None


@dataclass(frozen=True)
class _StepParts:
    """What a decode step costs besides its weights read, and how bytes are priced: for any batch."""

    active_fraction: float  # share of the weights one token reads
    read_kv: float  # bytes of one stream's KV at the mean context, per GPU
    bandwidth: float  # bytes/s
    efficiency: float
    comm_s: float
    overhead_s: float


@dataclass(frozen=True)
class _Decode:
    tps: float | None = None  # one stream
    gain: float | None = None  # speculative decoding
    terms_s: dict[DecodeBound, float] = field(default_factory=dict)  # per target step
    parts: _StepParts | None = None  # None when the weights read is unknown

    @property
    def bound(self) -> DecodeBound | None:
        return max(self.terms_s, key=lambda k: self.terms_s[k]) if self.terms_s else None


def _compute_precision(params: Knobs, hardware: HardwareProfile) -> tuple[str, float | None]:
    """(tensor-core precision the linear layers run in, its TFLOPS or None when the GPU has none)."""
    quant = params.get("quantization")
    precision = COMPUTE_PRECISION.get(str(quant), "bf16") if quant else "bf16"
    if params.get("moe_backend") == "marlin":
        precision = "bf16"
    tflops = {"fp8": hardware.fp8_tflops, "fp4": hardware.fp4_tflops, "bf16": hardware.bf16_tflops}[precision]
    return precision, tflops


def _decode_compute_s(case: _Case, verified: int) -> float | None:
    """The FLOPs of one decode step (2 x active params per verified token) at the profile's peak;
    None when the active parameter count is unknown."""
    model = case.model
    active_b = model.params_active_b or (None if model.is_moe else model.params_total_b)
    if not active_b:
        return None
    _, tflops = _compute_precision(case.params, case.hardware)
    tflops = tflops or case.hardware.bf16_tflops
    return 2 * active_b * 1e9 * verified / (tflops * 1e12 * case.tp)


def _decode(case: _Case, mem: _Memory) -> _Decode:
    """Decode tok/s of one stream, the speculative gain and the step's terms; empty when the
    weights read is unknown."""
    model, hardware, notes, tp, pp = case.model, case.hardware, case.notes, case.tp, case.pp
    fraction = _active_fraction(model, notes)
    length, cost, expert_factor = _spec(case.engine, case.params, model, notes)
    if mem.weights is None or fraction is None:
        return _Decode()
    read_weights = _weights_read(case, mem, fraction, expert_factor)
    mean_ctx = DECODE_PROMPT_TOKENS + case.space.workload.decode_max_tokens // 2
    mean_ctx = min(mean_ctx, mem.context) if mem.context else mean_ctx
    if mem.shape is not None:
        read_kv = _kv_bytes(mem.shape, mean_ctx) * mem.shape.gpu_fraction
    else:
        read_kv = 0.0
        notes.missing("KV read", "KV shape unknown; decode is an upper bound")
    efficiency = hardware.decode_efficiency
    if efficiency is None:
        efficiency = 1.0
        notes.assume(f"no fitted decode efficiency for {hardware.name}: bare roofline (an upper bound)")
    elif hardware.borrowed:
        notes.assume(f"decode efficiency {efficiency:g} and the fixed step borrowed from {hardware.fit_from}'s fit "
                     f"(same {hardware.compute_capability} architecture): {hardware.name} has measured none of its own")
    else:
        notes.assume(f"decode efficiency {efficiency:g} for {hardware.name}")
    notes.assume(f"decode at a mean context of {mean_ctx} tokens")
    if pp > 1:
        notes.assume(f"PP {pp}: stages run one after another for one stream (no decode speed-up)")
    bandwidth = hardware.mem_bandwidth_gbps * GB
    cores = hardware.cpu_cores
    if cores and (threads := case.engine.decode_threads(case.params, cores)) is not None:
        used = min(threads, cores)
        bandwidth *= used / cores
        notes.assume(f"decode on {used} of {cores} cores: that share of the memory bandwidth")
    eager = case.engine.eager(case.params)
    overhead_ms, what = (hardware.eager_step_overhead_ms, "eager (no CUDA graphs)") if eager else (hardware.step_overhead_ms, "")
    overhead_s = (overhead_ms or 0.0) / 1000
    if overhead_ms is None:
        notes.assume(f"no fitted {what + ' ' if what else ''}per-step overhead for {hardware.name} (counted as 0)")
    else:
        notes.assume(f"fixed {what + ' ' if what else ''}step overhead {overhead_ms:g} ms for {hardware.name}")
    comm_s = _allreduce_s(tp, hardware, model, notes)
    step_s = (read_weights + read_kv) / bandwidth / efficiency + comm_s + overhead_s
    terms = {
        DecodeBound.WEIGHTS: read_weights / bandwidth / efficiency,
        DecodeBound.KV_READ: read_kv / bandwidth / efficiency,
        DecodeBound.COMMUNICATION: comm_s,
        DecodeBound.STEP_OVERHEAD: overhead_s,
    }
    k = int(case.params.number("draft_k") or 0) if length > 1 else 0
    compute_s = _decode_compute_s(case, k + 1)
    if compute_s is not None:
        terms[DecodeBound.COMPUTE] = compute_s
        if compute_s > max(v for key, v in terms.items() if key is not DecodeBound.COMPUTE):
            notes.assume("compute-bound: the step's FLOPs at peak take longer than its memory reads; "
                         "the roofline counts bytes, so decode is an upper bound")
    parts = _StepParts(active_fraction=fraction, read_kv=read_kv, bandwidth=bandwidth, efficiency=efficiency,
                       comm_s=comm_s, overhead_s=overhead_s)
    return _Decode(tps=length / (step_s * cost), gain=length / cost, terms_s=terms, parts=parts)


def _weights_read(case: _Case, mem: _Memory, fraction: float, expert_factor: float) -> float:
    """Weight bytes one step reads per GPU; `expert_factor`: the routed experts it touches relative
    to one token's (speculative verification, a batch)."""
    model, tp = case.model, case.tp
    assert mem.weights is not None
    share = _expert_share(model)
    read_weights = mem.weights * fraction * ((1 - share) + share * expert_factor) / tp
    if mem.kept16 and model.params_total_b:
        # the 16-bit LM head is read whole every step; the rest at the quantized bits
        head = _embedding_params(model)[1]
        active = (model.params_active_b or model.params_total_b) * 1e9
        body_fraction = min(1.0, (active - head) / (model.params_total_b * 1e9 - mem.kept16))
        body = (mem.weights - mem.kept16 * 2) * body_fraction
        read_weights = (body * ((1 - share) + share * expert_factor) + head * 2) / tp
    return read_weights


# ---------------------------------------------------------------- N concurrent streams


def _streams(case: _Case, mem: _Memory, decode: _Decode) -> StreamsEstimate | None:
    """The capacity bound and each wave of workload.concurrency >= 2; None when the workload has no
    such level and the objective is not capacity_at_slo."""
    workload = case.space.workload
    levels = sorted({n for n in workload.concurrency if n > 1})
    if not levels and not case.space.objective.capacity:
        return None
    request = DECODE_PROMPT_TOKENS + workload.decode_max_tokens
    pool = streams_held(mem.pool_tokens, request) if mem.pool_tokens is not None else None
    if decode.parts is None or not levels:
        return StreamsEstimate(pool_streams=pool)
    stream_s = _stream_overhead_s(case)
    return StreamsEstimate(pool_streams=pool, waves={n: _wave(case, mem, decode, n, pool, stream_s) for n in levels})


def _stream_overhead_s(case: _Case) -> float:
    hardware, notes = case.hardware, case.notes
    if hardware.stream_step_overhead_ms is None:
        notes.assume(f"no fitted per-stream step cost for {hardware.name}: counted as 0 (output at N streams "
                     f"is an upper bound)")
        return 0.0
    notes.assume(f"each stream beyond the first adds {hardware.stream_step_overhead_ms:g} ms to a step "
                 f"({hardware.name}, fitted with CUDA graphs)")
    return hardware.stream_step_overhead_ms / 1000


def _batch(case: _Case, level: int, pool: int | None) -> tuple[int, BatchLimit]:
    """The streams one step of a wave of `level` requests decodes, and what set it."""
    cap = case.engine.max_batch(case.params)
    if cap is None:
        case.notes.assume(f"{case.engine.name}: no batch cap set, a wave's requests decode together (the "
                          f"engine's own default cap is not modelled)")
    batch, limit = level, BatchLimit.REQUESTS
    if cap is not None and cap < batch:
        batch, limit = cap, BatchLimit.ENGINE
    if pool is not None and pool < batch:
        batch, limit = pool, BatchLimit.KV_POOL
    return batch, limit


def _wave(case: _Case, mem: _Memory, decode: _Decode, level: int, pool: int | None, stream_s: float) -> WaveEstimate:
    """One wave of `level` requests: the step at its batch B reads the weights once (MoE: the experts
    B tokens touch) plus B streams' KV, and is at least B tokens' FLOPs at peak."""
    batch, limit = _batch(case, level, pool)
    assert decode.parts is not None and decode.tps is not None
    if batch == 1:  # one stream at a time: the single-stream prediction, drafting included
        step_ms = sum(v for k, v in decode.terms_s.items() if k is not DecodeBound.COMPUTE) * 1000
        return WaveEstimate(batch=1, limit=limit, step_ms=round(step_ms, 4), bound=decode.bound or DecodeBound.WEIGHTS,
                            output_tps=round(decode.tps, 2))
    parts, notes = decode.parts, case.notes
    if decode.gain is not None and decode.gain != 1.0:
        notes.assume("batch > 1: no speculative gain (drafting at batch is not modelled)")
    touched = _experts_touched(case.model, batch) if _expert_share(case.model) else None
    if touched is None and case.model.is_moe:
        notes.assume("batch reads: params_active_b < params_total_b without expert counts, so a batch is counted "
                     "as reading one token's active weights (an MoE batch touches more experts: output an upper bound)")
    read_weights = _weights_read(case, mem, parts.active_fraction, touched or 1.0)
    terms = {
        DecodeBound.WEIGHTS: read_weights / parts.bandwidth / parts.efficiency,
        DecodeBound.KV_READ: batch * parts.read_kv / parts.bandwidth / parts.efficiency,
        DecodeBound.COMMUNICATION: parts.comm_s,
        DecodeBound.STEP_OVERHEAD: parts.overhead_s,
        DecodeBound.STREAM_OVERHEAD: (batch - 1) * stream_s,
    }
    memory_s = ((read_weights + batch * parts.read_kv) / parts.bandwidth / parts.efficiency + parts.comm_s
                + parts.overhead_s + (batch - 1) * stream_s)
    compute_s = _decode_compute_s(case, batch)
    if compute_s is not None and compute_s > memory_s:
        step_s, bound = compute_s, DecodeBound.COMPUTE
    else:
        step_s, bound = memory_s, max(terms, key=lambda k: terms[k])
    return WaveEstimate(batch=batch, limit=limit, step_ms=round(step_s * 1000, 4), bound=bound,
                        output_tps=round(batch / step_s, 2))


def _prefill(case: _Case) -> float | None:
    model, hardware, notes = case.model, case.hardware, case.notes
    active_b = model.params_active_b or (None if model.is_moe else model.params_total_b)
    if not active_b:
        notes.missing("prefill", "active parameter count not given")
        return None
    efficiency = case.hardware.prefill_efficiency
    if efficiency is None:
        efficiency = 1.0
        notes.assume(f"no fitted prefill efficiency for {hardware.name}: bare roofline (an upper bound)")
    tflops = _prefill_tflops(case.params, hardware, notes)
    return efficiency * tflops * 1e12 * case.tp / (2 * active_b * 1e9)


def estimate(
    space: SearchSpace,
    candidate: Candidate,
    hardware: HardwareProfile,
    nodes: int,
) -> PlanEstimate:
    """Memory per GPU, fit, and predicted decode / prefill tok/s of `candidate` on `nodes` boxes,
    with the profile's fitted numbers (calibration passes a profile without them: the bare roofline).
    Raises ConfigError when the TP x PP layout does not match the cluster.
    """
    tp, pp = parallel_layout(space, candidate, hardware, nodes)
    case = _Case(
        space=space,
        engine=get_engine(space.engine),
        params=Knobs({**space.fixed, **candidate.params}),
        model=model_facts(space.model),
        hardware=hardware,
        tp=tp,
        pp=pp,
        notes=_Notes(),
    )
    mem = _memory(case)
    reason = _fit_reason(case, mem)
    decode = _decode(case, mem)
    streams = _streams(case, mem, decode)
    prefill = _prefill(case)
    notes = case.notes
    return PlanEstimate(
        candidate_key=candidate.key(),
        label=candidate.label(),
        tp=tp,
        pp=pp,
        weights_gb=_round(mem.weights_gpu_gb, 3),
        kv_gb=_round(mem.kv_gpu_gb, 3),
        overhead_gb=round(mem.overhead_gb, 3),
        total_gb=round(mem.total_gb, 3),
        usable_gb=round(mem.usable_gb, 2),
        engine_budget_gb=_round(mem.budget_gb),
        kv_pool_tokens=mem.pool_tokens,
        fits=reason is None,
        reason=reason,
        decode_tps=_round(decode.tps),
        prefill_tps=_round(prefill, 1),
        spec_gain=_round(decode.gain, 3),
        decode_bound=decode.bound,
        decode_terms_ms={k: round(v * 1000, 4) for k, v in decode.terms_s.items()},
        streams=streams,
        unknown=notes.unknown,
        assumptions=notes.assumptions,
    )


def _str(value: Scalar) -> str | None:
    return None if value is None else str(value)


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def _breakdown(weights: float | None, kv: float | None, overhead: float) -> str:
    def show(v: float | None) -> str:
        return "unknown" if v is None else f"{v:.1f}"

    return f"weights {show(weights)} + KV {show(kv)} + overhead {overhead:.1f}"


def plan(
    space: SearchSpace, candidates: Iterable[Candidate], hardware: HardwareProfile, nodes: int
) -> PlanReport:
    """Estimate every candidate; keep the ones that fit, fastest predicted decode first.

    A candidate the estimate refuses (ConfigError: a TP x PP that does not match the cluster, a
    malformed value) is dropped with that message; when every candidate is refused the first
    error is raised, since then the input itself is wrong (e.g. the --nodes value).
    """
    kept: list[PlanEstimate] = []
    dropped: list[PlanEstimate] = []
    refused: list[ConfigError] = []
    for candidate in candidates:
        try:
            est = estimate(space, candidate, hardware, nodes)
        except ConfigError as exc:
            refused.append(exc)
            dropped.append(dropped_estimate(candidate, str(exc)))
            continue
        (kept if est.fits else dropped).append(est)
    if refused and len(refused) == len(dropped) and not kept:
        raise refused[0]
    kept.sort(key=lambda e: (e.decode_tps is None, -(e.decode_tps or 0.0)))
    return PlanReport(
        space=space.name, hardware=hardware.name, nodes=nodes, gpus_per_node=hardware.gpus_per_node,
        memory_gb_per_gpu=hardware.memory_gb_per_gpu, detected_on=hardware.detected_on, kept=kept, dropped=dropped,
    )


def dropped_estimate(candidate: Candidate, message: str) -> PlanEstimate:
    return PlanEstimate(
        candidate_key=candidate.key(), label=candidate.label(), tp=0, pp=0, weights_gb=None,
        kv_gb=None, overhead_gb=0.0, total_gb=0.0, usable_gb=0.0, fits=False, reason=message,
    )


def kv_pool_of(space: SearchSpace, hardware: HardwareProfile, nodes: int) -> Callable[[Candidate], int | None]:
    """The planner's KV pool of a candidate in tokens (None: the engine sets no memory budget, or a
    term is unknown): a capacity search probes no more streams than it holds requests."""

    def pool(candidate: Candidate) -> int | None:
        try:
            return estimate(space, candidate, hardware, nodes).kv_pool_tokens
        except ConfigError:
            return None

    return pool


def fits_check(space: SearchSpace, hardware: HardwareProfile, nodes: int) -> Callable[[Candidate], str | None]:
    """A space.Pruner check: the planner's drop reason for a candidate, None when it fits."""

    def check(candidate: Candidate) -> str | None:
        try:
            est = estimate(space, candidate, hardware, nodes)
        except ConfigError as exc:
            return f"planner: {exc}"
        return None if est.fits else f"planner: {est.reason}"

    return check
