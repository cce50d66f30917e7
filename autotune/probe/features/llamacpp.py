"""llama.cpp's feature probes (through llama-cpp-python), with the real model: the parent side.

For each KV cache type pair (type_k x type_v) x flash attention, and for prompt-lookup drafting,
a child process (`python -m autotune.probe.programs.llamacpp_features`) creates a real context, generates a few
greedy tokens for fixed prompts and reports the token ids. This side compares them with the
f16/f16 reference run.

Golden check: for every prompt the first `MATCH_TOKENS` generated tokens must equal the
reference's. The prompts have one obvious continuation (counting, the days of the week), so
quantized KV (even q4_0) keeps them, while open prompts would flip near-tied tokens and fail
configurations that work. Garbage output from a broken kernel does not keep them.

A context that cannot be created fails with llama.cpp's own log line as evidence (the child runs
with verbose=True, so llama.cpp logs to its stderr, which the runner classifies).
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.errors import EngineUnavailable, ModelNotFound
from autotune.probe.order import BUDGET_USED_UP, order_cells, settled
from autotune.models import ProbeResult, Scalar, SearchSpace
from autotune.probe.runner import python_module_argv, run_probe_subprocess
from autotune.engines.signatures import GOLDEN_MISMATCH_MARKER
from autotune.space.candidates import load_space

if TYPE_CHECKING:
    from autotune.engines.base import Engine, ProbeRequest

KV_TYPES = ("f16", "q8_0", "q4_0")  # the matrix: autotune/probe/programs/llamacpp_features.py can create each
DRAFT_KS = (2, 4)
MATCH_TOKENS = 4  # of the child's MAX_TOKENS greedy tokens per prompt


@dataclass(frozen=True)
class LlamaCppConfig:
    """One combination of llama.cpp knobs that a probe run creates a context with."""

    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: bool = False
    draft_k: int = 0  # prompt-lookup tokens per step; 0 = no drafting

    @property
    def feature(self) -> str:
        if self.draft_k:
            return f"draft_k={self.draft_k}"
        return f"type_k={self.type_k},type_v={self.type_v},flash_attn={'on' if self.flash_attn else 'off'}"

    @property
    def params(self) -> dict[str, Scalar]:
        if self.draft_k:
            return {"draft_k": self.draft_k}
        return {"type_k": self.type_k, "type_v": self.type_v, "flash_attn": self.flash_attn}

    def argv(self, model_path: str, n_threads: int) -> list[str]:
        return python_module_argv(
            "autotune.probe.programs.llamacpp_features",
            "--model", model_path,
            "--type-k", self.type_k,
            "--type-v", self.type_v,
            "--flash-attn", "on" if self.flash_attn else "off",
            "--draft-k", str(self.draft_k),
            "--threads", str(n_threads),
        )


REFERENCE = LlamaCppConfig()


def default_configs(draft_ks: tuple[int, ...] = DRAFT_KS) -> list[LlamaCppConfig]:
    """The full matrix: every type_k x type_v x flash_attn, then prompt-lookup drafting at each k."""
    kv = [
        LlamaCppConfig(k, v, fa)
        for k in KV_TYPES
        for v in KV_TYPES
        for fa in (False, True)
    ]
    return kv + [LlamaCppConfig(draft_k=k) for k in draft_ks]


DEFAULTS: dict[str, Scalar] = {"type_k": "f16", "type_v": "f16", "flash_attn": False, "draft_k": 0}


def feature_probes(engine: Engine, request: ProbeRequest) -> list[ProbeResult]:
    """`Engine.feature_probes` for llama.cpp: the matrix, less the cells already settled."""
    space = load_space(request.space_name) if request.space_name else None
    return probe_llamacpp(request.model_path, timeout_s=request.timeout_s, budget_s=request.budget_s, space=space,
                          settled=settled(request.stored))


def probe_llamacpp(
    model_path: str,
    timeout_s: float = 120,
    n_threads: int = 2,
    configs: list[LlamaCppConfig] | None = None,
    *,
    budget_s: float | None = None,
    space: SearchSpace | None = None,
    settled: set[str] | frozenset[str] = frozenset(),
    clock: Callable[[], float] = time.monotonic,
) -> list[ProbeResult]:
    """Probe each config for real; the f16/f16 reference comes first in the returned list.

    Configs run in autotune.probe.order's order (what `space` uses first); those in `settled`
    (decided by an earlier probe) are left out; those not started within `budget_s` (counted
    after the reference, which always runs: the others are judged against it) come back
    "untested" with the reason.

    :raises ModelNotFound: the model file does not exist.
    :raises EngineUnavailable: llama-cpp-python is not installed.
    """
    if not Path(model_path).is_file():
        raise ModelNotFound(f"model file not found: {model_path}")
    if importlib.util.find_spec("llama_cpp") is None:
        raise EngineUnavailable("llama-cpp-python is not installed: pip install 'autotune[llamacpp]'")
    wanted = [c for c in (configs if configs is not None else default_configs())
              if c != REFERENCE and c.feature not in settled]
    ordered = order_cells(wanted, lambda c: c.params, is_reference=lambda c: c == REFERENCE, space=space,
                          defaults=DEFAULTS)
    reference, ref_tokens = _run(model_path, REFERENCE, timeout_s, n_threads)
    if ref_tokens is not None:
        reference = _judge(reference, ref_tokens, None)
    results = [reference]
    deadline = None if budget_s is None else clock() + budget_s  # the budget is for the matrix
    for config, why in ordered:
        if deadline is not None and clock() > deadline:
            results.append(ProbeResult(feature=config.feature, status="untested", params=config.params,
                                       evidence=f"{BUDGET_USED_UP}; {why}"))
            continue
        result, tokens = _run(model_path, config, timeout_s, n_threads)
        results.append(_judge(result, tokens, ref_tokens) if tokens is not None else result)
    return results


def _run(
    model_path: str, config: LlamaCppConfig, timeout_s: float, n_threads: int
) -> tuple[ProbeResult, list[list[int]] | None]:
    result = run_probe_subprocess(
        config.argv(model_path, n_threads), config.feature, timeout_s, params=config.params
    )
    if result.status != "works":
        return result, None
    try:
        report = json.loads(result.evidence)
        return result, [list(map(int, t)) for t in report["tokens"]]
    except (ValueError, KeyError, TypeError):
        return result.model_copy(
            update={"status": "fails", "signature": "unclassified_crash",
                    "evidence": f"probe printed no token report: {result.evidence[:300]}"}
        ), None


def _judge(result: ProbeResult, tokens: list[list[int]], ref_tokens: list[list[int]] | None) -> ProbeResult:
    report = json.loads(result.evidence)
    texts: list[str] = report["texts"]
    shown = " | ".join(repr(t) for t in texts)
    problems = [
        f"prompt {i + 1}: " + why
        for i, out in enumerate(tokens)
        if (why := _degenerate(out))
    ]
    if ref_tokens is not None:
        for i, (out, ref) in enumerate(zip(tokens, ref_tokens)):
            if out[:MATCH_TOKENS] != ref[:MATCH_TOKENS]:
                problems.append(f"prompt {i + 1}: first {MATCH_TOKENS} tokens {out[:MATCH_TOKENS]} "
                                f"differ from the f16/f16 reference {ref[:MATCH_TOKENS]}")
    basis = (
        f"first {MATCH_TOKENS} greedy tokens of {len(tokens)} prompts match the f16/f16 reference"
        if ref_tokens is not None
        else "reference run (non-degenerate output)" if result.feature == REFERENCE.feature
        else "no f16/f16 reference to compare with: checked for non-degenerate output only"
    )
    timing = f"load {report['load_s']:.1f} s, generate {report['generate_s']:.1f} s"
    if problems:
        return result.model_copy(update={
            "status": "fails",
            "signature": "silent_miscompute",
            "evidence": f"{GOLDEN_MISMATCH_MARKER}: " + "; ".join(problems) + f"\noutput: {shown}",
        })
    return result.model_copy(update={"evidence": f"{basis}; output: {shown}; {timing}"})


def _degenerate(tokens: list[int]) -> str | None:
    if not tokens:
        return "no tokens generated"
    if len(tokens) >= MATCH_TOKENS and len(set(tokens)) == 1:
        return f"one token repeated ({tokens[0]})"
    return None
